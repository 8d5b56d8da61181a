"""``raydag batch`` of many wide cases through one supervisor: runs per second, errors, supervisor memory.

Each case is a copy of C-104 (24 documents: a 24-way fan-out of resolves after three first-layer reads), under
a case id of its own (a batch file lists each case once). ``raydag batch`` runs in a new process, as a user
starts it (its own local Ray, or in a smoke run the smoke run's), against a fresh database. Meanwhile the
supervisor actor's resident memory is sampled every half second: at its first sample (the batch starting),
at its last (the batch ending) and at its peak. ``BENCH_BATCH_RUNS`` sets how many runs (default 1,000).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import psutil

from bench._harness import fresh_database
from bench._ray import SMOKE_RAY, local_ray
from bench._smoke import SMOKE, sized
from mcp_server.seed import SeedData, demo_seed
from tests.caseops import prepare_caseops_database

RUNS = sized(int(os.environ.get("BENCH_BATCH_RUNS", "1000")), 4)
CONCURRENCY = int(os.environ.get("BENCH_BATCH_CONCURRENCY", "16"))
TEMPLATE = "C-104"


def wide_cases(count: int) -> tuple[SeedData, list[str]]:
    """``count`` copies of C-104 and its documents, as ``C-W0000``…, and their ids."""
    demo = demo_seed().model_dump(mode="json")
    ids = [f"C-W{index:04d}" for index in range(count)]
    cases = [row for row in demo["cases"] if row["case_id"] == TEMPLATE]
    documents = [row for row in demo["source_documents"] if row["case_id"] == TEMPLATE]
    template = json.dumps({"cases": cases, "source_documents": documents})
    copies: dict[str, list[object]] = {"cases": [], "source_documents": []}
    for case_id in ids:
        copy = json.loads(template.replace(TEMPLATE, case_id).replace("C104", case_id.replace("-", "")))
        for kind in copies:
            copies[kind].extend(copy[kind])
    return SeedData.model_validate(copies), ids


class _SupervisorMemory:
    """Samples the resident memory of the ``RunSupervisor`` actors below this process, in MB."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _SupervisorMemory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            rss = 0
            for process in psutil.Process().children(recursive=True):
                try:
                    if " ".join(process.cmdline()).startswith("ray::RunSupervisor"):
                        rss += process.memory_info().rss
                except psutil.Error:
                    continue
            if rss:
                self.samples.append(rss / 2**20)


def main() -> None:
    seed, ids = wide_cases(RUNS)
    with fresh_database() as dsn, tempfile.TemporaryDirectory() as folder:
        asyncio.run(prepare_caseops_database(dsn, seed))
        cases = Path(folder) / "cases.txt"
        cases.write_text("\n".join(ids) + "\n")
        report = Path(folder) / "report.json"
        env = {
            key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))
        }
        env.update(RAYDAG_HOME=folder, RAYDAG_DATABASE_URL=dsn, RAY_USAGE_STATS_ENABLED="0")
        with local_ray(**SMOKE_RAY) if SMOKE else nullcontext():
            if SMOKE:
                import ray

                env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
            command = [
                str(Path(sys.executable).parent / "raydag"),
                "batch",
                str(cases),
                "--concurrency",
                str(CONCURRENCY),
                "--report",
                str(report),
            ]
            started = time.perf_counter()
            with _SupervisorMemory() as memory:
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - started
        if not report.exists():
            raise RuntimeError(f"raydag batch wrote no report:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        totals = json.loads(report.read_text())["totals"]
    by_status = totals["by_status"]
    errors = totals["cases"] - by_status.get("completed", 0)
    samples = memory.samples or [float("nan")]
    # The first sample, then at each quarter of the batch: flat memory is a flat row, a leak a rising one.
    marks = [samples[min(len(samples) - 1, len(samples) * quarter // 4)] for quarter in range(4)]
    marks.append(samples[-1])
    print(f"\n### Batch of wide cases through one supervisor ({RUNS} copies of C-104, 24-way fan-out)\n")
    print(
        "| runs | concurrency | batch s | runs/s | not completed | supervisor RSS MB at start "
        "| at 1/4 | at 1/2 | at 3/4 | at end | peak | wall s (with start-up) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    rate = totals["cases"] / totals["seconds"]
    print(
        f"| {totals['cases']} | {CONCURRENCY} | {totals['seconds']:.1f} | {rate:.1f} | {errors} "
        + "".join(f"| {mark:.0f} " for mark in marks)
        + f"| {max(samples):.0f} | {wall:.1f} |"
    )
    print(f"\nBy status: {json.dumps(by_status)}")

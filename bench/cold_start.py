"""The first run on a new supervisor against a warm one: do its independent calls start together?

Each sample is a new process, as ``raydag demo`` or a ``ray job submit`` job is: it brings up the runtime
(``raydag.start()``, as a script would: a new supervisor and its tool callers; its own local Ray, or in a smoke
run the smoke run's), then runs case C-102 twice. For each run, from its nodes (the tool ledger): when the
three independent first-layer calls (``case``, ``policy``, ``docs``) were dispatched and when each started at
the tool (worker clock), in ms from the run's first dispatch. The spread is the last start minus the first.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path

from bench._harness import fresh_database
from bench._ray import SMOKE_RAY, local_ray
from bench._smoke import SMOKE, sized

SAMPLES = sized(int(os.environ.get("BENCH_COLD_SAMPLES", "3")), 1)
FIRST_LAYER = ("case", "policy", "docs")


def _probe() -> None:
    """In the sample's process: bring the runtime up, run C-102 twice, print each run's first-layer times."""
    import raydag  # type: ignore[import-not-found]  # installed from actors/python_api; mypy sees no alias

    found = []
    with raydag.start() as rd:  # as a script would: the environment's settings, the caseops toolset
        for _ in range(2):
            run = rd.run(resource={"case_id": "C-102"}, planner="conformance")
            nodes = [node for node in run.nodes if node["dispatched_at"] is not None]
            first = min(datetime.fromisoformat(node["dispatched_at"]) for node in nodes)
            found.append(
                {
                    node["node_id"]: {
                        "dispatched": (datetime.fromisoformat(node["dispatched_at"]) - first).total_seconds()
                        * 1000,
                        "started": (datetime.fromisoformat(node["started_at"]) - first).total_seconds()
                        * 1000,
                    }
                    for node in nodes
                    if node["node_id"] in FIRST_LAYER
                }
            )
    print(json.dumps(found))


def _sample(dsn: str, home: Path, joined: dict[str, str]) -> list[dict[str, dict[str, float]]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))}
    env.update(RAYDAG_HOME=str(home), RAYDAG_DATABASE_URL=dsn, RAY_USAGE_STATS_ENABLED="0", **joined)
    done = subprocess.run(
        [sys.executable, "-m", "bench.cold_start", "--probe"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the cold-start probe failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    runs: list[dict[str, dict[str, float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return runs


def main() -> None:
    samples: list[list[dict[str, dict[str, float]]]] = []
    with fresh_database() as dsn, tempfile.TemporaryDirectory(prefix="raydag-cold-start-") as folder:
        home = Path(folder)
        joined: dict[str, str] = {}
        with local_ray(**SMOKE_RAY) if SMOKE else nullcontext():
            if SMOKE:
                import ray

                joined["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
            for _ in range(SAMPLES):
                samples.append(_sample(dsn, home, joined))
    print(f"\n### Cold start: the first run on a new supervisor against a warm run (median of {SAMPLES})\n")
    print(
        "| run | last first-layer dispatch ms | first call starts ms | last call starts ms | start spread ms |"
    )
    print("|---|---|---|---|---|")
    for index, label in enumerate(("first run on a new supervisor", "second run (warm)")):
        runs = [sample[index] for sample in samples]
        dispatched = statistics.median(max(node["dispatched"] for node in run.values()) for run in runs)
        first = statistics.median(min(node["started"] for node in run.values()) for run in runs)
        last = statistics.median(max(node["started"] for node in run.values()) for run in runs)
        spread = statistics.median(
            max(node["started"] for node in run.values()) - min(node["started"] for node in run.values())
            for run in runs
        )
        print(f"| {label} | {dispatched:.0f} | {first:.0f} | {last:.0f} | {spread:.0f} |")


if __name__ == "__main__" and sys.argv[1:] == ["--probe"]:
    _probe()

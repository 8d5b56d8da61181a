"""Large outputs: one upstream node returns ~10 MB and 1, 4 or 16 dependents read from it.

Each dependent reads a field of the upstream output (``/node``) and waits 100 ms; the same DAG with a
payload-free upstream is the baseline, so the cost of the 10 MB itself shows as the difference. Measured by
the supervisor actor during each run: the end-to-end time, the peak growth of its resident memory (``VmHWM``
after resetting it), its CPU time, and what the run wrote to PostgreSQL. Runs interleave by size.

A dependent cannot take the whole payload as an argument: the tool server refuses request bodies over
64 KiB, so outputs that large flow to dependents only in parts.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import uuid
from collections import defaultdict

from bench._cpu import wait_for_quiet
from bench._harness import Bench, RunTimes, bench_runtime
from bench._smoke import sized
from bench._synthetic import Node, Shape

SAMPLES = sized(int(os.environ.get("BENCH_SAMPLES", "5")), 1)
PAYLOAD_KB = sized(10 * 1024, 64)
DEPENDENTS = sized((1, 4, 16), (1,))
DEPENDENT_MS = sized(100, 10)
EXECUTOR = "callers"
"""The shipped tool executor: the supervisor's caller actors."""


def fan_out(dependents: int, payload_kb: int) -> Shape:
    upstream = Node("big", 0, payload_kb=payload_kb)
    readers = tuple(Node(f"d{i}", DEPENDENT_MS, ("big",)) for i in range(dependents))
    return Shape(f"{payload_kb} KiB → {dependents}", (upstream, *readers))


async def _stored_bytes(bench: Bench, run_id: str) -> int:
    import asyncpg

    connection = await asyncpg.connect(bench.dsn)
    try:
        size: int = await connection.fetchval(
            "SELECT COALESCE(sum(octet_length(data::text)), 0) FROM run_events WHERE run_id = $1",
            uuid.UUID(run_id),
        )
        return size
    finally:
        await connection.close()


async def _measure(bench: Bench) -> tuple[dict[tuple[int, int], list[RunTimes]], dict[tuple[int, int], int]]:
    cases = [(payload, dependents) for dependents in DEPENDENTS for payload in (PAYLOAD_KB, 0)]
    runs: dict[tuple[int, int], list[RunTimes]] = defaultdict(list)
    stored: dict[tuple[int, int], int] = {}
    for payload, dependents in sized(cases, []):  # warm-up
        await bench.raydag(fan_out(dependents, payload), executor=EXECUTOR)
    for sample in range(SAMPLES):
        shift = sample % len(cases)
        for payload, dependents in cases[shift:] + cases[:shift]:
            wait_for_quiet()
            times = await bench.raydag(fan_out(dependents, payload), executor=EXECUTOR)
            runs[(payload, dependents)].append(times)
            stored[(payload, dependents)] = await _stored_bytes(bench, times.run_id)
    await bench.close()
    return runs, stored


def _size(kb: int) -> str:
    return f"{kb // 1024} MiB" if kb >= 1024 else f"{kb} KiB"


def main() -> None:
    with bench_runtime() as bench:
        runs, stored = asyncio.run(_measure(bench))
    print(f"\n### Large outputs: a {_size(PAYLOAD_KB)} output read by N dependents (median of {SAMPLES})\n")
    print(
        "| dependents | upstream output | end-to-end ms | upstream call ends → supervisor has it ms "
        "| success decided → first dependent's call starts ms | supervisor peak RSS growth MB "
        "| supervisor CPU ms | event log MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for dependents in DEPENDENTS:
        for payload in (PAYLOAD_KB, 0):
            samples = runs[(payload, dependents)]
            upstream = [next(node for node in times.nodes if node["node_id"] == "big") for times in samples]
            received = [node["recorded"] - node["finished"] for node in upstream]
            # The success is recorded with the dispatches it makes ready, in one append: a dependent's call
            # starts once that append has committed and the call has been handed to a caller.
            handed_on = [
                min(node["started"] for node in times.nodes if node["node_id"] != "big") - big["recorded"]
                for times, big in zip(samples, upstream, strict=True)
            ]
            print(
                f"| {dependents} | {_size(payload) if payload else 'none'} "
                f"| {statistics.median(times.e2e_ms for times in samples):.0f} "
                f"| {statistics.median(received):.0f} "
                f"| {statistics.median(handed_on):.0f} "
                f"| {statistics.median(times.peak_rss_growth_mb for times in samples):.1f} "
                f"| {statistics.median(times.cpu_s * 1000 for times in samples):.0f} "
                f"| {stored[(payload, dependents)] / 1e6:.2f} |"
            )

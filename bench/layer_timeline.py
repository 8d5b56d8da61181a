"""Where a wide layer's time goes: the timestamps of one layer of 100 ms tools, with the calls in the caller
actor (as shipped) and in the supervisor's loop, interleaved run by run.

From each run's records (``bench._harness.RunTimes``: the ledger's dispatch, start and finish, and each node's
recorded success), relative to the layer's dispatch: when the first and the last call started, how long a
call took where it was made, when the last call ended, and how long an outcome waited to be stored after it
landed (median and worst over the layer). ``BENCH_LAYER_WIDTH`` sets the layer's width (16).
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Callable

from bench._harness import Bench, RunTimes, bench_runtime
from bench._smoke import sized
from bench._synthetic import lattice

WIDTH = sized(int(os.environ.get("BENCH_LAYER_WIDTH", "16")), 2)
RUNS = sized(int(os.environ.get("BENCH_LAYER_RUNS", "12")), 1)
WARM_UP_RUNS = sized(2, 0)
ARMS = {
    "callers": "caller actor (as shipped)",
    "supervisor": "calls in the supervisor's loop",
}

Measure = Callable[[RunTimes], float]
MEASURES: dict[str, Measure] = {
    "first call starts": lambda run: min(node["started"] for node in run.nodes),
    "last call starts": lambda run: max(node["started"] for node in run.nodes),
    "a call (median over the layer)": lambda run: statistics.median(
        node["finished"] - node["started"] for node in run.nodes
    ),
    "last call ends": lambda run: max(node["finished"] for node in run.nodes),
    "an outcome landed → stored (median over the layer)": lambda run: statistics.median(
        node["recorded"] - node["finished"] for node in run.nodes
    ),
    "an outcome landed → stored (worst in the layer)": lambda run: max(
        node["recorded"] - node["finished"] for node in run.nodes
    ),
    "last success stored (the makespan)": lambda run: run.makespan_ms,
}
"""Milliseconds from the layer's dispatch (or a duration), per run."""


async def _measure(bench: Bench) -> dict[str, list[RunTimes]]:
    shape = lattice(WIDTH, 1)
    runs: dict[str, list[RunTimes]] = {arm: [] for arm in ARMS}
    for _ in range(WARM_UP_RUNS):
        for arm in ARMS:
            await bench.raydag(shape, executor=arm)
    for index in range(RUNS):
        order = list(ARMS) if index % 2 == 0 else list(reversed(ARMS))
        for arm in order:
            runs[arm].append(await bench.raydag(shape, executor=arm))
    await bench.close()
    return runs


def main() -> None:
    with bench_runtime() as bench:
        runs = asyncio.run(_measure(bench))
    critical = lattice(WIDTH, 1).critical_path_ms()
    print(f"\n### A layer's timeline: {WIDTH} calls of {critical} ms tools (median of {RUNS} runs, ms)\n")
    print("| from the layer's dispatch | " + " | ".join(ARMS.values()) + " |")
    print("|---|" + "---|" * len(ARMS))
    for label, measure in MEASURES.items():
        cells = [f"{statistics.median(measure(run) for run in runs[arm]):.1f}" for arm in ARMS]
        print(f"| {label} | " + " | ".join(cells) + " |")

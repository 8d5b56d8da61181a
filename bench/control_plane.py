"""Control-plane cost per node, with tools that answer at once: a 50-node chain and a 256-node wide DAG.

The same supervisor runs each DAG with five executors, interleaved run by run, so the layers' costs separate:

- ``control plane alone``: the call is answered inside the supervisor (no Ray, no MCP): validation,
  authorization, the fingerprint gate, token minting and every transition written to PostgreSQL.
- ``+ Ray task``: each call is a Ray task that answers without calling the tool server.
- ``+ Ray task + MCP``: ``RAYDAG_TOOL_EXECUTOR=tasks``: a Ray task calling ``bench_wait`` over MCP.
- ``caller actor + MCP``: ``RAYDAG_TOOL_EXECUTOR=callers``: the supervisor's ``ToolCaller`` actor makes the
  calls (``callers2``: two of them, the default before 2026-12-02).
- ``supervisor's loop + MCP``: ``RAYDAG_TOOL_EXECUTOR=supervisor``: the supervisor makes them itself.

Chain: milliseconds per node = makespan ÷ nodes, and where a node's time goes (from the supervisor's and
the worker's timestamps). Wide DAG: nodes per second = nodes ÷ makespan, at the default ``max_parallel``
(16) and at 64. Supervisor CPU is the actor process's own CPU time during the run.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
from collections import defaultdict
from typing import Any

from bench._cpu import wait_for_quiet
from bench._harness import Bench, RunTimes, bench_runtime
from bench._smoke import sized
from bench._synthetic import Node, Shape, lattice

SAMPLES = sized(int(os.environ.get("BENCH_SAMPLES", "3")), 1)
CHAIN_NODES = sized(50, 4)
WIDE_NODES = sized(256, 4)
CHAIN_GOAL_MS = 5.0
WIDE_GOAL_PER_S = 300.0

ALL_EXECUTORS = {
    "inline": "control plane alone (no Ray, no MCP)",
    "ray": "+ Ray task per call (no MCP)",
    "mcp": "+ Ray task + MCP (RAYDAG_TOOL_EXECUTOR=tasks)",
    "callers-per-call": "caller actors + MCP, one actor call per tool call (before exchanges)",
    "callers": "caller actor + MCP (RAYDAG_TOOL_EXECUTOR=callers, one caller)",
    "callers2": "two caller actors + MCP (RAYDAG_TOOL_CALLERS=2, the default before 2026-12-02)",
    "supervisor": "supervisor's loop + MCP (RAYDAG_TOOL_EXECUTOR=supervisor)",
}
EXECUTORS = {
    key: ALL_EXECUTORS[key]
    for key in os.environ.get("BENCH_EXECUTORS", "inline,ray,mcp,callers-per-call,callers,supervisor").split(
        ","
    )
}
"""The arms, ``BENCH_EXECUTORS`` to choose (keys of ``ALL_EXECUTORS``, in order)."""
WIDE_PARALLEL = {"ray": (16,), "mcp": (16,)}
"""At 16 and 64 in flight, but a Ray task per call in flight needs a worker process each: at 64 the tasks
mostly wait for new workers."""


def chain(nodes: int) -> Shape:
    return Shape(
        f"chain of {nodes}", tuple(Node(f"n{i}", 0, (f"n{i - 1}",) if i else ()) for i in range(nodes))
    )


def _phases(times: RunTimes) -> dict[str, float]:
    """Median per chain node: dispatch → the call starts → it ends → the supervisor has it → next dispatch."""
    nodes = times.nodes
    gaps = {
        "dispatch → call starts": [node["started"] - node["dispatched"] for node in nodes],
        "the call": [node["finished"] - node["started"] for node in nodes],
        "call ends → supervisor has result": [node["recorded"] - node["finished"] for node in nodes],
        "result → next dispatch": [
            later["dispatched"] - node["recorded"] for node, later in itertools.pairwise(nodes)
        ],
    }
    return {name: statistics.median(values) for name, values in gaps.items()}


async def _measure(
    bench: Bench,
) -> tuple[dict[tuple[str, str, int | None], list[RunTimes]], dict[str, list[float]]]:
    line, wide = chain(CHAIN_NODES), lattice(WIDE_NODES, 1, ms=0)
    runs: dict[tuple[str, str, int | None], list[RunTimes]] = defaultdict(list)
    # The same calls from the benchmark process, with no control plane: one after another, or 16 at a time.
    bare: dict[str, list[float]] = defaultdict(list)
    cases: list[tuple[Shape, str, int | None]] = [(line, executor, None) for executor in EXECUTORS]
    cases += [
        (wide, executor, parallel)
        for executor in EXECUTORS
        for parallel in WIDE_PARALLEL.get(executor, (16, 64))
    ]
    for shape, executor, parallel in sized(cases, []):  # warm-up
        await bench.raydag(
            shape if shape is line else lattice(16, 1, ms=0), max_parallel=parallel, executor=executor
        )
    for sample in range(SAMPLES):
        shift = sample % len(cases)
        for shape, executor, parallel in cases[shift:] + cases[:shift]:
            wait_for_quiet()
            runs[(shape.name, executor, parallel)].append(
                await bench.raydag(shape, max_parallel=parallel, executor=executor)
            )
        bare[line.name].append(await bench.waves(line))
        bare[wide.name].append(await bench.waves(wide, limit=16))
    await bench.close()
    return runs, bare


def _median(values: list[Any]) -> float:
    return float(statistics.median(values))


def main() -> None:
    with bench_runtime() as bench:
        runs, bare = asyncio.run(_measure(bench))
    line = chain(CHAIN_NODES).name
    wide = lattice(WIDE_NODES, 1, ms=0).name
    print(f"\n### Control plane, {line} zero-latency nodes (median of {SAMPLES})\n")
    phases = list(_phases(runs[(line, "inline", None)][0]))
    print("| executor | ms per node | best run | supervisor CPU ms per node | " + " | ".join(phases) + " |")
    print("|---|---|---|---|" + "---|" * len(phases))
    for executor, label in EXECUTORS.items():
        samples = runs[(line, executor, None)]
        per_node = _median([times.makespan_ms / CHAIN_NODES for times in samples])
        best = min(times.makespan_ms / CHAIN_NODES for times in samples)
        cpu = _median([times.cpu_s * 1000 / CHAIN_NODES for times in samples])
        split = {name: _median([_phases(times)[name] for times in samples]) for name in phases}
        print(
            f"| {label} | {per_node:.1f} | {best:.1f} | {cpu:.1f} | "
            + " | ".join(f"{split[name]:.1f}" for name in phases)
            + " |"
        )
    print(
        f"| MCP calls alone, one after another (no control plane) | {_median(bare[line]) / CHAIN_NODES:.1f} "
        f"| {min(bare[line]) / CHAIN_NODES:.1f} | | | | | |"
    )
    print(f"\nGoal: ≤ {CHAIN_GOAL_MS:g} ms per node on a chain.")
    print(f"\n### Control plane, {wide} (median of {SAMPLES})\n")
    print("| executor | max_parallel | nodes/s | makespan ms | supervisor CPU ms per node |")
    print("|---|---|---|---|---|")
    for executor, label in EXECUTORS.items():
        for parallel in WIDE_PARALLEL.get(executor, (16, 64)):
            samples = runs[(wide, executor, parallel)]
            rate = _median([WIDE_NODES / times.makespan_ms * 1000 for times in samples])
            makespan = _median([times.makespan_ms for times in samples])
            cpu = _median([times.cpu_s * 1000 / WIDE_NODES for times in samples])
            print(f"| {label} | {parallel} | {rate:.0f} | {makespan:.0f} | {cpu:.2f} |")
    print(
        f"| MCP calls alone, 16 at a time (no control plane) | 16 | {WIDE_NODES / _median(bare[wide]) * 1000:.0f} "
        f"| {_median(bare[wide]):.0f} | |"
    )
    print(f"\nGoal: ≥ {WIDE_GOAL_PER_S:g} nodes/s on a wide DAG.")

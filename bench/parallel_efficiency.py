"""Parallel efficiency: makespan ÷ critical path of the same DAGs under several schedulers, side by side.

Every arm calls the same ``bench_wait`` tool on the same MCP server over HTTP, each call with its own task token:

- ``raydag (caller actors, as shipped)``: the supervisor dispatches each node the moment it is ready, after
  validating, authorizing and recording it in PostgreSQL, to its ``ToolCaller`` actor
  (``RAYDAG_TOOL_EXECUTOR=callers``, the default), the calls a step makes ready in one exchange; ``callers2``
  adds the same with two callers (the default before 2026-12-02).
- ``raydag, an actor call per tool call``: the same actors, each call an actor task of its own (the shipped
  path before exchanges; ``BENCH_PARALLEL_ARMS`` to add it).
- ``raydag, calls in the supervisor's loop``: the same supervisor making the calls itself
  (``RAYDAG_TOOL_EXECUTOR=supervisor``): no Ray actor call each way.
- ``raydag, a Ray task per call``: the same supervisor with ``RAYDAG_TOOL_EXECUTOR=tasks``: a Ray task (and so
  a worker process) per call in flight (``BENCH_PARALLEL_ARMS`` to add it).
- ``one at a time``: the shipped runtime with ``max_parallel=1``: one node after another, as a ReAct loop runs.
- ``asyncio waves``: the benchmark process gathers each layer of the DAG, then the next.
- ``LangGraph``: one graph node per DAG node, one edge per dependency (its supersteps are barriers).

For raydag the makespan runs from the first node's dispatch to the last node's recorded success (the
supervisor's clock); for the in-process arms, from the first call to the last answer. The critical path is
the longest latency path. Rounds interleave the arms shape by shape, rotating their order.
"""

from __future__ import annotations

import asyncio
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable

from bench._cpu import ROLES, wait_for_quiet
from bench._harness import Bench, bench_runtime, langgraph_installed
from bench._smoke import SMOKE, sized
from bench._synthetic import Shape, lattice, long_beside_chain, uneven_chains

SAMPLES = sized(int(os.environ.get("BENCH_SAMPLES", "3")), 1)
WIDTHS = sized((1, 4, 8, 16, 32), (2,))
DEPTHS = sized((1, 6), (1, 2))
ONE_AT_A_TIME_MAX_NODES = 48
"""Larger DAGs take seconds one node at a time, and their ratio is known without running: about the width."""
GOAL = 1.10
GOAL_MAX_WIDTH = 16

TASKS = "raydag, a Ray task per call"
PER_CALL = "raydag, an actor call per tool call (before exchanges)"
E2E = "raydag e2e (submit → finished run)"
CALLERS = "raydag (caller actors, as shipped)"
TWO_CALLERS = "raydag, two caller actors (before)"
SUPERVISOR = "raydag, calls in the supervisor's loop"
ONE_AT_A_TIME = "one at a time"
WAVES = "asyncio waves"
LANGGRAPH = "LangGraph"
ORDER = (CALLERS, E2E, TWO_CALLERS, PER_CALL, SUPERVISOR, ONE_AT_A_TIME, WAVES, LANGGRAPH, TASKS)
"""The order of the columns and lines of every table (each shows the arms it has figures for)."""
ARM_KEYS = {
    "tasks": TASKS,
    "callers-per-call": PER_CALL,
    "callers": CALLERS,
    "callers2": TWO_CALLERS,
    "supervisor": SUPERVISOR,
    "waves": WAVES,
    "langgraph": LANGGRAPH,
}
ARMS = tuple(
    ARM_KEYS[key]
    for key in os.environ.get("BENCH_PARALLEL_ARMS", "callers,supervisor,waves,langgraph").split(",")
    if key != "langgraph" or not SMOKE or langgraph_installed()
)
"""``BENCH_PARALLEL_ARMS`` chooses them (keys of ``ARM_KEYS``). A Ray task per call is left out unless asked
for: its worker processes, started by the dozen and reaped after a second idle, land their whole CPU time on
whichever arm runs when Ray reaps them. A smoke run leaves LangGraph out unless the ``bench`` extra is
installed (``make bench`` installs it)."""


def shapes() -> list[tuple[Shape, int]]:
    """Each shape with its width (what ``max_parallel`` must cover)."""
    grid = [(lattice(width, depth), width) for depth in DEPTHS for width in WIDTHS]
    return sized([*grid, (long_beside_chain(), 2), (uneven_chains(), 8)], grid)


def barrier_bound(shape: Shape) -> float:
    """What a scheduler that waits for each whole layer achieves at best, ÷ the critical path."""
    return sum(max(node.ms for node in layer) for layer in shape.layers()) / shape.critical_path_ms()


async def _measure(
    bench: Bench,
) -> tuple[dict[tuple[str, str], list[float]], dict[str, defaultdict[str, float]], Counter[str], list[bool]]:
    cases = shapes()
    graphs = {shape.name: bench.langgraph(shape) for shape, _ in cases} if LANGGRAPH in ARMS else {}
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[str, defaultdict[str, float]] = defaultdict(lambda: defaultdict(float))
    nodes_run: Counter[str] = Counter()
    quiet: list[bool] = []

    def arm(name: str, shape: Shape) -> Callable[[], Awaitable[tuple[float, float | None]]]:
        async def raydag(executor: str, max_parallel: int | None) -> tuple[float, float | None]:
            times = await bench.raydag(shape, max_parallel=max_parallel, executor=executor)
            return times.makespan_ms, times.e2e_ms

        async def in_process(ms: Awaitable[float]) -> tuple[float, float | None]:
            return await ms, None

        runs = {
            TASKS: lambda: raydag("mcp", None),
            PER_CALL: lambda: raydag("callers-per-call", None),
            CALLERS: lambda: raydag("callers", None),
            TWO_CALLERS: lambda: raydag("callers2", None),
            SUPERVISOR: lambda: raydag("supervisor", None),
            ONE_AT_A_TIME: lambda: raydag("callers", 1),
            WAVES: lambda: in_process(bench.waves(shape)),
            LANGGRAPH: lambda: in_process(bench.run_langgraph(graphs[shape.name])),
        }
        return runs[name]

    warm_up = () if SMOKE else (cases[1], cases[2])
    for shape, _ in warm_up:  # Ray workers, caller actors, MCP clients
        for name in ARMS:
            await arm(name, shape)()
    for sample in range(SAMPLES):
        for index, (shape, _) in enumerate(cases):
            quiet.append(wait_for_quiet())
            names = list(ARMS)
            if sample == 0 and len(shape.nodes) <= ONE_AT_A_TIME_MAX_NODES:
                names.append(ONE_AT_A_TIME)
            shift = (sample + index) % len(names)
            for name in names[shift:] + names[:shift]:
                with bench.cpu.measure() as used:
                    makespan_ms, e2e_ms = await arm(name, shape)()
                for role, seconds in used.items():
                    cpu[name][role] += seconds
                nodes_run[name] += len(shape.nodes)
                critical = shape.critical_path_ms()
                ratios[(shape.name, name)].append(makespan_ms / critical)
                if e2e_ms is not None and name == CALLERS:
                    ratios[(shape.name, E2E)].append(e2e_ms / critical)
    await bench.close()
    return ratios, cpu, nodes_run, quiet


def main() -> None:
    with bench_runtime() as bench:
        ratios, cpu, nodes_run, quiet = asyncio.run(_measure(bench))
    cases = shapes()
    columns = [name for name in ORDER if any(ratios[(shape.name, name)] for shape, _ in cases)]
    print("\n### Parallel efficiency: makespan ÷ critical path (median)\n")
    print("| shape | nodes | critical path ms | " + " | ".join(columns) + " | barrier bound |")
    print("|---|---|---|" + "---|" * len(columns) + "---|")
    for shape, _ in cases:
        cells = [
            f"{statistics.median(ratios[(shape.name, column)]):.2f}" if ratios[(shape.name, column)] else "—"
            for column in columns
        ]
        print(
            f"| {shape.name} | {len(shape.nodes)} | {shape.critical_path_ms()} | "
            + " | ".join(cells)
            + f" | {barrier_bound(shape):.2f} |"
        )
    print(
        f"\nSamples per cell: {SAMPLES} ({ONE_AT_A_TIME}: 1). Rounds begun on a quiet machine "
        f"(under 50 % busy): {sum(quiet)} of {len(quiet)}."
    )
    if LANGGRAPH not in ARMS:
        print(f"- {LANGGRAPH}: not run (smoke run without the `bench` extra, which `make bench` installs)")
    for name in (name for name in ORDER if name in ARMS):
        worst = max(
            (statistics.median(ratios[(shape.name, name)]), shape.name)
            for shape, width in cases
            if width <= GOAL_MAX_WIDTH
        )
        verdict = "meets" if worst[0] <= GOAL else "misses"
        print(
            f"- {name}: worst at width ≤ {GOAL_MAX_WIDTH} is {worst[0]:.2f} ({worst[1]}): "
            f"{verdict} the goal ≤ {GOAL:.2f}"
        )
    peers = [name for name in (WAVES, LANGGRAPH) if name in ARMS]
    if CALLERS in ARMS and peers:
        behind = [
            shape.name
            for shape, _ in cases
            if any(
                statistics.median(ratios[(shape.name, CALLERS)])
                >= statistics.median(ratios[(shape.name, peer)])
                for peer in peers
            )
        ]
        print(
            f"- {CALLERS} ahead of {' and '.join(peers)} on {len(cases) - len(behind)} of {len(cases)} shapes"
            + (f"; not on {', '.join(behind)}" if behind else "")
        )
    print("\n### CPU per node, by process (ms, all shapes)\n")
    print("| arm | " + " | ".join(ROLES) + " | total |")
    print("|---|" + "---|" * (len(ROLES) + 1))
    for name in (name for name in ORDER if nodes_run[name]):
        per_node = {role: cpu[name][role] * 1000 / nodes_run[name] for role in ROLES}
        print(
            f"| {name} | "
            + " | ".join(f"{per_node[role]:.1f}" for role in ROLES)
            + f" | {sum(per_node.values()):.1f} |"
        )

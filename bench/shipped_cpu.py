"""CPU per node of the runtime as a script runs it: ``raydag.start()`` over the shipped caseops toolset.

The other DAG benchmarks build their supervisor by hand beside a tool server of their own; this one goes the
way users do (``import raydag``, the caseops toolset declared in ``mcp_server/caseops.yaml``, its tool server
in this process), so it measures the call path toolset servers take. After warm-up runs, it runs case C-104
(3 independent calls, then 24 alias resolutions) ``BENCH_SHIPPED_RUNS`` times, one after another, and reads
the CPU time (user + system, ``psutil``) each process spent meanwhile: the supervisor actor, its tool-caller
actors (found by their actor names), and this process (the tool server, and the script waiting on its runs).
Divided by the nodes run.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import ExitStack
from typing import Any

import psutil

from actors.calls.call import ExecutorKind
from actors.launch.settings import Settings
from bench._harness import fresh_database
from bench._smoke import sized

RUNS = sized(int(os.environ.get("BENCH_SHIPPED_RUNS", "40")), 2)
WARM_UP = sized(5, 1)
CASE = {"case_id": "C-104"}


def _actor_processes(settings: Settings) -> dict[str, list[psutil.Process]]:
    """This run's supervisor and tool callers, found by their actor names (not every Ray on the machine's)."""
    import ray

    from actors.supervisor import NAMESPACE

    def pid(name: str) -> int:
        actor: Any = ray.get_actor(name, namespace=NAMESPACE)
        return int(ray.get(actor.ping.remote())["pid"])

    name = f"{settings.supervisor_name}-cli-{os.getpid()}"  # as actors.launch.local.local_runtime names it
    callers = [f"{name}-tool-caller-{index}" for index in range(settings.tool_callers)]
    if settings.tool_executor is not ExecutorKind.CALLERS:  # RAYDAG_TOOL_EXECUTOR: no caller actors
        callers = []
    return {
        "RunSupervisor": [psutil.Process(pid(name))],
        "ToolCaller": [psutil.Process(pid(caller)) for caller in callers],
        "this process (tool server, script)": [psutil.Process()],
    }


def _cpu_s(processes: dict[str, list[psutil.Process]]) -> dict[str, float]:
    return {role: sum(sum(process.cpu_times()[:2]) for process in group) for role, group in processes.items()}


def main() -> None:
    import raydag  # type: ignore[import-not-found]  # installed from actors/python_api; mypy sees no alias

    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        home = stack.enter_context(tempfile.TemporaryDirectory(prefix="raydag-bench-shipped-"))
        settings = Settings(home=home, database_url=dsn, supervisor_name="raydag-bench-shipped-cpu")
        rd = stack.enter_context(raydag.start(settings=settings))
        for _ in range(WARM_UP):
            rd.run(resource=CASE, planner="conformance")
        processes = _actor_processes(settings)
        before, started = _cpu_s(processes), time.monotonic()
        nodes = sum(len(rd.run(resource=CASE, planner="conformance").nodes) for _ in range(RUNS))
        wall_s, after = time.monotonic() - started, _cpu_s(processes)

    print(
        f"\n### Shipped runtime, CPU per node by process (C-104 × {RUNS}, one run at a time,"
        f" RAYDAG_TOOL_EXECUTOR={settings.tool_executor})\n"
    )
    print("| process | processes | CPU ms per node |")
    print("|---|---|---|")
    for role, group in processes.items():
        print(f"| {role} | {len(group)} | {1000 * (after[role] - before[role]) / nodes:.2f} |")
    total = sum(after.values()) - sum(before.values())
    print(
        f"| all of the above | {sum(len(group) for group in processes.values())} | {1000 * total / nodes:.2f} |"
    )
    print(f"\n{nodes} nodes in {wall_s:.1f} s ({1000 * wall_s / RUNS:.0f} ms per run).")

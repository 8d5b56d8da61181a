"""Load through Serve: concurrent C-102 runs at 8, 32 and 128 clients, beside the same runs one at a time.

One process brings up a fresh database, a local Ray as ``raydag serve`` starts it (all the machine's CPUs, no
dashboard) and the Serve app on loopback. Each level runs every arm, one after the other (``BENCH_LOAD_ARMS``,
``executor/mcp``):

- executor ``tasks`` (a Ray task per call) or ``callers`` (the supervisor's caller actors: ``RAYDAG_TOOL_CALLERS``'
  default, one; ``callers2`` for two, and so on);
- mcp ``serve``: the tool server mounted at the app's own ``/mcp``, as ``serve run`` deploys it (and
  ``raydag serve`` did until 2026-12-02), so tool calls cross the Serve proxy and share the replica with the
  API; ``app``: the tool server as a Serve application of its own at ``/mcp`` beside the API's
  (``actors.api.app.layout``): the same proxy, a replica of its own; ``process``: a tool server in a process
  of its own, past the proxy (what ``raydag serve`` does now, in its own process, and what ``RAYDAG_MCP_URL``
  pointing at ``raydag mcp`` gives).

For each arm at each level, the app is redeployed with a fresh supervisor, then:

1. a few runs one at a time, then the supervisor's idle RSS (the baseline);
2. warm-up: the level's clients for ``BENCH_LOAD_WARMUP_S`` (not counted);
3. measured: the level's clients for ``BENCH_LOAD_SECONDS``. Each posts ``POST /runs?wait=60`` for C-102 and
   posts again when the answer comes. A success is a run that came back ``completed``; anything else is an
   error, with why. Meanwhile the supervisor's RSS and active runs are sampled;
4. the runs the clients gave up on are left to finish (the supervisor drives them regardless);
5. sequential: as many runs as the level completed, one client, one after another.

Runs/s = completed runs answered inside the window ÷ the window; latency is the client's, request to answer,
over every run started in the window. Supervisor memory per in-flight run = (mean RSS while loaded − idle
baseline) ÷ mean active runs. CPU is by process, from the window's start until its last answer.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil

from actors.api.app import TOOLS_NAME
from actors.calls.call import ExecutorKind
from actors.calls.exchange import DEFAULT_CALLERS
from actors.launch.settings import DEV_API_KEYS, shipped_toolsets
from actors.supervisor import SupervisorConfig
from bench._cpu import CpuMeter, machine_busy
from bench._harness import fresh_database, tool_server_process
from bench._load import (
    PHASES,
    Attempt,
    SupervisorSampler,
    drained,
    error_reasons,
    failed_nodes,
    one_run,
    percentile,
    phases,
    profile,
    rss_kb,
    run_clients,
)
from bench._ray import local_ray
from bench._smoke import sized
from dag.budget import Budgets
from mcp_server.server import MCP_PATH
from tests.loopback import free_port, wait_until_ok

LEVELS = sized(
    tuple(int(level) for level in os.environ.get("BENCH_LOAD_CLIENTS", "8,32,128").split(",")), (2,)
)
SECONDS = sized(float(os.environ.get("BENCH_LOAD_SECONDS", "20")), 1.0)
WARMUP_S = sized(float(os.environ.get("BENCH_LOAD_WARMUP_S", "5")), 0.0)
ARMS = tuple(
    tuple(arm.split("/"))
    for arm in sized(
        os.environ.get("BENCH_LOAD_ARMS", "callers/serve,callers/app,callers/process"), "callers/app"
    ).split(",")
)
"""A smoke run takes one arm (the tool server's own Serve app, the one no other test deploys through Serve's
proxy at ``/mcp``): each arm redeploys the app, the slowest step here."""
PROFILE_DIR = os.environ.get("BENCH_LOAD_PROFILE")
"""A directory: py-spy records the busy processes of each measured window there (a diagnostic: adds load)."""
SEQUENTIAL_WARMUP_RUNS = sized(5, 1)
IDLE_SETTLE_S = sized(2.0, 0.0)
"""How long the supervisor idles after the warm-up runs before its idle memory is read."""
DRAIN_S = 120.0
GOAL_RUNS_PER_S = 40.0
GOAL_P99_MS = 1000.0
MCP_PLACES = {
    "serve": "mounted in the API app (`serve run`; `raydag serve` before 2026-12-02)",
    "app": "own Serve app",
    "process": "own process, past the proxy (as `raydag serve` ships)",
}

ROLES = (
    "supervisor",
    "Serve replica",
    "Serve tool replica",
    "Serve proxy",
    "tool server process",
    "tool calls",
    "Ray daemons",
    "PostgreSQL",
    "benchmark process",
)


def _role(tool_server_pid: int, process: psutil.Process, title: str) -> str:
    if process.pid == os.getpid():
        return "benchmark process"
    if process.pid == tool_server_pid:
        return "tool server process"
    if title.startswith("postgres"):
        return "PostgreSQL"
    if title.startswith("ray::RunSupervisor"):
        return "supervisor"
    if title.startswith(f"ray::ServeReplica:{TOOLS_NAME}"):
        return "Serve tool replica"
    if title.startswith("ray::ServeReplica"):
        return "Serve replica"
    if title.startswith("ray::ProxyActor"):
        return "Serve proxy"
    if title.startswith(("ray::tool:", "ray::IDLE", "ray::ToolCaller", "ray::execute_tool_call")):
        return "tool calls"  # tool tasks, idle workers waiting for the next, or the caller actors
    return "Ray daemons"


@dataclass
class Level:
    """One arm at one level of concurrency: what the clients saw and what the runtime spent."""

    arm: str
    clients: int
    attempts: list[Attempt]
    window: tuple[float, float]
    wall_s: float
    sampler: SupervisorSampler
    idle_rss_mb: float
    cpu_s: dict[str, float]
    busy_before: float
    drain_s: float
    phase_ms: dict[str, list[float]] = field(default_factory=dict)
    failed_nodes: Counter[str] = field(default_factory=Counter)
    sequential: list[Attempt] = field(default_factory=list)
    sequential_s: float = 0.0

    def successes(self) -> list[Attempt]:
        return [attempt for attempt in self.attempts if attempt.error is None]

    def runs_per_s(self) -> float:
        start, end = self.window
        return sum(1 for attempt in self.successes() if attempt.answered <= end) / (end - start)

    def sequential_runs_per_s(self) -> float:
        done = sum(1 for attempt in self.sequential if attempt.error is None)
        return done / self.sequential_s if self.sequential_s else 0.0

    def memory_per_run_mb(self) -> float:
        active = self.sampler.mean_active()
        return (self.sampler.mean_rss_mb() - self.idle_rss_mb) / active if active else float("nan")


@contextmanager
def serve_runtime() -> Iterator[tuple[str, str]]:
    """A fresh database, a local Ray as ``raydag serve`` starts it, and Serve on a free loopback port."""
    from ray import serve

    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        stack.enter_context(local_ray(namespace="raydag", log_to_driver=False))
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        stack.callback(serve.shutdown)
        yield dsn, f"http://127.0.0.1:{port}"


def deploy(
    dsn: str,
    base_url: str,
    mcp_url: str,
    key: bytes,
    name: str,
    executor: ExecutorKind,
    *,
    own_app: bool,
    tool_latency_ms: int = 0,
    tool_callers: int = DEFAULT_CALLERS,
) -> Any:
    """(Re)deploy the app, as shipped, with a supervisor of its own; the supervisor once the app answers.
    ``own_app``: the default layout (the tool server an application of its own at ``/mcp``); otherwise one
    application with the tool server mounted in it, and no other at ``/mcp``."""
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, Scaling, build_app, layout

    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=mcp_url,
            token_key=key,
            limits=Budgets(),
            tool_executor=executor,
            tool_callers=tool_callers,
            toolsets=shipped_toolsets(mcp_url),
        ),
        api_keys=dict(DEV_API_KEYS),
        supervisor_name=name,
        tool_latency_ms=tool_latency_ms,
    )
    if own_app:
        for app_name, (route_prefix, application) in layout(config, Scaling()).items():
            serve.run(application, name=app_name, route_prefix=route_prefix, blocking=False)
    else:
        if TOOLS_NAME in serve.status().applications:
            serve.delete(TOOLS_NAME)
        serve.run(build_app(config, Scaling()), name="raydag", route_prefix="/", blocking=False)
    wait_until_ok(base_url + "/healthz", within_s=90)
    return ray.get_actor(name, namespace="raydag")


async def _sequential(base_url: str, runs: int) -> tuple[list[Attempt], float]:
    async with httpx.AsyncClient(base_url=base_url, timeout=90) as http:
        started = time.perf_counter()
        attempts = [await one_run(http) for _ in range(runs)]
        return attempts, time.perf_counter() - started


def _profile_targets(supervisor_pid: int, tool_server_pid: int) -> dict[str, int]:
    """The supervisor, Serve's replica and proxy, the caller actors and the tool server process."""
    targets = {"supervisor": supervisor_pid}
    if tool_server_pid:
        targets["tool-server"] = tool_server_pid
    for process in psutil.Process().children(recursive=True):
        try:
            title = " ".join(process.cmdline())
        except psutil.Error:
            continue
        role = _role(0, process, title)
        if role in ("Serve replica", "Serve tool replica", "Serve proxy") or title.startswith(
            "ray::ToolCaller"
        ):
            targets[f"{title.split()[0].removeprefix('ray::').split(':')[0]}-{process.pid}"] = process.pid
    return targets


async def _level(
    dsn: str, base_url: str, supervisor: Any, arm: str, clients: int, cpu: CpuMeter, tool_server_pid: int
) -> Level:
    pid = int((await supervisor.ping.remote())["pid"])
    warm, _ = await _sequential(base_url, SEQUENTIAL_WARMUP_RUNS)
    if any(attempt.error for attempt in warm):
        raise RuntimeError(f"warm-up runs failed: {error_reasons(warm)}")
    await asyncio.sleep(IDLE_SETTLE_S)
    idle_rss_mb = statistics.median([rss_kb(pid) for _ in range(5)]) / 1024
    await run_clients(base_url, clients, WARMUP_S)
    await drained(supervisor, DRAIN_S)
    busy_before = machine_busy()
    sampler = SupervisorSampler(supervisor, pid)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.sample(stop))
    profilers = []
    if PROFILE_DIR:
        label = f"{arm.replace(', ', '-').replace(' ', '_')}-{clients}"
        profilers = profile(_profile_targets(pid, tool_server_pid), SECONDS, Path(PROFILE_DIR) / label)
    started = time.perf_counter()
    with cpu.measure() as used:
        attempts, start, end = await run_clients(base_url, clients, SECONDS)
    wall_s = time.perf_counter() - started
    stop.set()
    await sampling
    for profiler in profilers:
        profiler.wait()
    level = Level(
        arm=arm,
        clients=clients,
        attempts=attempts,
        window=(start, end),
        wall_s=wall_s,
        sampler=sampler,
        idle_rss_mb=idle_rss_mb,
        cpu_s=dict(used),
        busy_before=busy_before,
        drain_s=await drained(supervisor, DRAIN_S),  # runs whose clients gave up are still going
    )
    level.phase_ms = await phases(dsn, level.successes())
    level.failed_nodes = await failed_nodes(dsn, attempts)
    runs = sized(max(1, len(level.successes())), 1)
    level.sequential, level.sequential_s = await _sequential(base_url, runs)
    return level


def _measure() -> list[Level]:
    import ray

    levels: list[Level] = []
    with ExitStack() as stack:
        dsn, base_url = stack.enter_context(serve_runtime())
        key = secrets.token_bytes(32)
        tool_server_url, tool_server_pid = "", 0
        if any(mcp == "process" for _, mcp in ARMS):
            tool_server_url, tool_server_pid = stack.enter_context(tool_server_process(dsn, key))
        cpu = CpuMeter(dsn.rsplit("/", 1)[1].split("?")[0], 0, classify=partial(_role, tool_server_pid))
        for round_, clients in enumerate(LEVELS):  # the arms of a level side by side: the load drifts
            for executor, mcp in ARMS:
                arm = f"{executor}, MCP {MCP_PLACES[mcp]}"
                mcp_url = tool_server_url if mcp == "process" else base_url + MCP_PATH
                name = f"raydag-load-{executor}-{mcp}-{clients}-{round_}"
                kind, callers = _executor(executor)
                supervisor = deploy(
                    dsn, base_url, mcp_url, key, name, kind, own_app=mcp == "app", tool_callers=callers
                )
                level = asyncio.run(
                    _level(
                        dsn,
                        base_url,
                        supervisor,
                        arm,
                        clients,
                        cpu,
                        tool_server_pid if mcp == "process" else 0,
                    )
                )
                ray.kill(supervisor)
                levels.append(level)
                errors = dict(error_reasons(level.attempts))
                print(f"[{arm} × {clients}] {level.runs_per_s():.1f} runs/s, errors {errors}", flush=True)
    return levels


def _executor(arm: str) -> tuple[ExecutorKind, int]:
    """An arm's executor, and its number of caller actors (the default unless the arm names one: ``callers2``)."""
    kind = arm.rstrip("0123456789")
    return ExecutorKind(kind), int(arm[len(kind) :]) if arm != kind else DEFAULT_CALLERS


def _ms(values: list[float], share: float) -> str:
    return f"{percentile(values, share):.0f}" if values else "—"


def _report(levels: list[Level]) -> None:
    print(f"\n### Load through Serve ({SECONDS:g} s per level after {WARMUP_S:g} s of warm-up)\n")
    print(
        "| arm | clients | runs | runs/s | p50 ms | p99 ms | errors | sequential runs/s | sequential p50 ms "
        "| sequential p99 ms | runs/s ÷ sequential | mean in-flight runs | supervisor idle MB "
        "| loaded MB (mean / peak) | MB per in-flight run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for level in levels:
        ok = [attempt.latency_ms for attempt in level.successes()]
        sequential_ok = [attempt.latency_ms for attempt in level.sequential if attempt.error is None]
        sequential_rate = level.sequential_runs_per_s()
        ratio = f"{level.runs_per_s() / sequential_rate:.2f}" if sequential_rate else "—"
        print(
            f"| {level.arm} | {level.clients} | {len(ok)} | {level.runs_per_s():.1f} | {_ms(ok, 0.5)} "
            f"| {_ms(ok, 0.99)} | {len(level.attempts) - len(ok)} | {sequential_rate:.1f} "
            f"| {_ms(sequential_ok, 0.5)} | {_ms(sequential_ok, 0.99)} | {ratio} "
            f"| {level.sampler.mean_active():.1f} | {level.idle_rss_mb:.0f} "
            f"| {level.sampler.mean_rss_mb():.0f} / {level.sampler.peak_rss_mb():.0f} "
            f"| {level.memory_per_run_mb():.2f} |"
        )
    reasons: Counter[str] = Counter()
    for level in levels:
        for reason, count in error_reasons(level.attempts).items():
            reasons[f"{level.arm} × {level.clients}: {reason}"] += count
        for reason, count in error_reasons(level.sequential).items():
            reasons[f"{level.arm} × {level.clients}, sequential after it: {reason}"] += count
        for node, count in level.failed_nodes.items():
            reasons[f"{level.arm} × {level.clients}: failed attempts in those runs: {node}"] += count
    if reasons:
        print("\nErrors by reason:\n")
        for reason, count in sorted(reasons.items()):
            print(f"- {reason}: {count}")
    drains = ", ".join(f"{level.arm} × {level.clients}: {level.drain_s:.0f} s" for level in levels)
    print(f"\nRuns left going after the measured answers, finished within: {drains}.")

    print("\n### Where a run's time goes under load (median / p99 ms; node phases per call)\n")
    print("| arm | clients | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for level in levels:
        cells = [
            f"{_ms(level.phase_ms[phase], 0.5)} / {_ms(level.phase_ms[phase], 0.99)}" for phase in PHASES
        ]
        print(f"| {level.arm} | {level.clients} | " + " | ".join(cells) + " |")

    print("\n### CPU by process while loaded (ms per completed run; cores busy over the window)\n")
    print("| arm | clients | " + " | ".join(ROLES) + " | total | cores busy |")
    print("|---|---|" + "---|" * (len(ROLES) + 2))
    for level in levels:
        runs = max(1, len(level.successes()))
        cells = [f"{level.cpu_s.get(role, 0.0) * 1000 / runs:.1f}" for role in ROLES]
        total = sum(level.cpu_s.values())
        print(
            f"| {level.arm} | {level.clients} | " + " | ".join(cells) + f" | {total * 1000 / runs:.1f} "
            f"| {total / level.wall_s:.2f} |"
        )
    busy = ", ".join(f"{level.arm} × {level.clients}: {level.busy_before:.0%}" for level in levels)
    print(f"\nMachine busy just before each measured window (anyone's processes): {busy}.")
    print(
        f"\nGoals: at 32 clients ≥ {GOAL_RUNS_PER_S:g} runs/s with p99 ≤ {GOAL_P99_MS:g} ms and no errors; "
        "at 128 clients no errors."
    )


def main() -> None:
    _report(_measure())

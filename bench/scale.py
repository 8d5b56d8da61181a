"""Scale: one supervisor against two and four, side by side in one run, at 32 and 128 clients through Serve.

One process brings up a fresh database, a local Ray as ``raydag serve`` starts it, Serve on loopback and the
caseops tool server in a process of its own (as ``raydag serve`` ships it). For each level of clients, each arm
(``BENCH_SCALE_SUPERVISORS``, default ``1,2,4``) in turn, alternating the order from one round to the next
(``BENCH_SCALE_ROUNDS``): the app is deployed with that many supervisors (``RAYDAG_SUPERVISORS``), warmed up,
then ``BENCH_SCALE_SECONDS`` of closed-loop clients each posting ``POST /runs?wait=60`` for C-102. Then, per
arm and round, a wide DAG: ``BENCH_SCALE_WIDE_CLIENTS`` closed-loop clients each posting a plan of
``BENCH_SCALE_WIDE_NODES`` independent ``bench_wait`` calls that answer at once (up to 64 at a time), for
``BENCH_SCALE_WIDE_SECONDS``: nodes/s through the whole deployment, and the CPU and PostgreSQL work per node.

Measured per arm: runs/s and latency as the clients saw them; CPU by process from the window's start to its
last answer (every supervisor counted as "supervisors"); and PostgreSQL's own work — the CPU of the
database's backends and the transactions it committed (``pg_stat_database.xact_commit``: each transition an
append of one statement, each read one) — per tool call the window dispatched (``tool_ledger``). On two cores
more supervisors cannot add throughput: what this shows is what they cost (CPU per run) and what is shared
(PostgreSQL's work per call, the figure that sizes a cluster's database).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from importlib import resources
from typing import Any

import asyncpg
import yaml

from actors.launch.settings import DEV_API_KEYS, SHIPPED_TOOLSETS, ApiKeyGrant
from actors.supervisor import NAMESPACE, SupervisorConfig
from actors.toolsets.config import Toolsets, parse_toolsets
from bench._cpu import CpuMeter, machine_busy
from bench._harness import LIMITS, tool_server_process
from bench._load import (
    CASE,
    HEADERS,
    Attempt,
    drained,
    error_reasons,
    one_run,
    percentile,
    phases,
    run_clients,
)
from bench._smoke import sized
from bench._synthetic import BENCH_WAIT, SCOPE, lattice
from bench.load import _role, serve_runtime
from tests.loopback import wait_until_ok

LEVELS = sized(
    tuple(int(level) for level in os.environ.get("BENCH_SCALE_CLIENTS", "32,128").split(",")), (2,)
)
ARMS = sized(tuple(int(arm) for arm in os.environ.get("BENCH_SCALE_SUPERVISORS", "1,2,4").split(",")), (1, 2))
ROUNDS = sized(int(os.environ.get("BENCH_SCALE_ROUNDS", "2")), 1)
SECONDS = sized(float(os.environ.get("BENCH_SCALE_SECONDS", "20")), 1.0)
WARMUP_S = sized(float(os.environ.get("BENCH_SCALE_WARMUP_S", "5")), 0.0)
WIDE_NODES = sized(int(os.environ.get("BENCH_SCALE_WIDE_NODES", "64")), 4)
WIDE_CLIENTS = sized(int(os.environ.get("BENCH_SCALE_WIDE_CLIENTS", "4")), 1)
WIDE_SECONDS = sized(float(os.environ.get("BENCH_SCALE_WIDE_SECONDS", "15")), 1.0)
WIDE_KEY = "bench-scale-wide"
"""The API key of the wide DAG's clients: tenant-demo, with the benchmark tool's scope."""
WIDE = {
    **CASE,
    "planner": "outputs",
    "plan": lattice(WIDE_NODES, 1, ms=0).plan(),
    "budgets": {"max_nodes": WIDE_NODES, "max_parallel": 64},
}
DRAIN_S = 120.0
ROLES = (
    "supervisors",
    "Serve replica",
    "Serve proxy",
    "tool server process",
    "tool calls",
    "Ray daemons",
    "PostgreSQL",
)


@dataclass
class Arm:
    supervisors: int
    clients: int
    attempts: list[Attempt]
    window: tuple[float, float]
    wall_s: float
    cpu_s: dict[str, float]
    commits: int
    calls: int
    busy_before: float
    phase_ms: dict[str, list[float]]
    """Milliseconds per completed run in each of ``bench._load.PHASES`` (admission: "request → run created")."""

    def successes(self) -> list[Attempt]:
        return [attempt for attempt in self.attempts if attempt.error is None]

    def runs_per_s(self) -> float:
        start, end = self.window
        return sum(1 for attempt in self.successes() if attempt.answered <= end) / (end - start)

    def cpu_ms_per_run(self, role: str | None = None) -> float:
        runs = max(1, len(self.successes()))
        used = sum(self.cpu_s.values()) if role is None else self.cpu_s.get(role, 0.0)
        return used * 1000 / runs

    def errors(self) -> int:
        return len(self.attempts) - len(self.successes())

    def commits_per_call(self) -> float:
        """PostgreSQL's transactions per tool call the window dispatched."""
        return self.commits / max(1, self.calls)

    def cores_busy(self) -> float:
        return sum(self.cpu_s.values()) / self.wall_s

    def nodes_per_s(self) -> float:
        """For a wide arm: the DAGs' nodes that completed within the window, per second."""
        return self.runs_per_s() * WIDE_NODES


def _classify(tool_server_pid: int, process: Any, title: str) -> str:
    role = _role(tool_server_pid, process, title)
    return "supervisors" if role == "supervisor" else role


def _toolsets(mcp_url: str) -> Toolsets:
    """The shipped caseops toolset, with the benchmark's ``bench_wait`` (which the tool server also serves)."""
    package, name = SHIPPED_TOOLSETS.split(":")
    declared = yaml.safe_load(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
    declared["servers"][0]["tools"][BENCH_WAIT.name] = {
        "scope": SCOPE,
        "risk": "read_only",
        "run_bound": {"case_id": "case_id"},
    }
    return parse_toolsets(yaml.safe_dump(declared), "bench-scale.yaml", {"RAYDAG_MCP_URL": mcp_url})


def _deploy(dsn: str, base_url: str, mcp_url: str, key: bytes, name: str, supervisors: int) -> list[Any]:
    """The app, as shipped, with ``supervisors`` supervisors of its own; their handles once it answers."""
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, Scaling, build_app

    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn, mcp_url=mcp_url, token_key=key, limits=LIMITS, toolsets=_toolsets(mcp_url)
        ),
        api_keys={
            **DEV_API_KEYS,
            WIDE_KEY: ApiKeyGrant(tenant_id="tenant-demo", subject="bench", scopes=(SCOPE,)),
        },
        supervisor_name=name,
        supervisors=supervisors,
    )
    serve.run(build_app(config, Scaling()), name="raydag", route_prefix="/", blocking=False)
    wait_until_ok(base_url + "/readyz", within_s=120)
    return [ray.get_actor(each, namespace=NAMESPACE) for each in config.supervisor_names]


async def _database_work(dsn: str, since: datetime) -> tuple[int, int]:
    """Transactions the database has committed so far, and the tool calls dispatched since ``since``."""
    connection = await asyncpg.connect(dsn)
    try:
        commits: int = await connection.fetchval(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        calls: int = await connection.fetchval(
            "SELECT count(*) FROM tool_ledger WHERE dispatched_at >= $1", since
        )
        return commits, calls
    finally:
        await connection.close()


async def _arm(
    dsn: str,
    base_url: str,
    handles: list[Any],
    supervisors: int,
    clients: int,
    cpu: CpuMeter,
    *,
    wide: bool = False,
) -> Arm:
    """One measured window of ``clients`` closed-loop clients: C-102 runs, or (``wide``) wide DAGs."""
    import httpx

    body, headers = (WIDE, {"Authorization": f"Bearer {WIDE_KEY}"}) if wide else (CASE, HEADERS)
    seconds = WIDE_SECONDS if wide else SECONDS
    async with httpx.AsyncClient(base_url=base_url, timeout=90) as http:
        for _ in range(sized(3, 1)):
            await one_run(http, body, headers)
    await run_clients(base_url, clients, WARMUP_S, body, headers)
    for handle in handles:
        await drained(handle, DRAIN_S)
    busy_before = machine_busy()
    since = datetime.now(UTC)
    commits_before, _ = await _database_work(dsn, since)
    started = time.perf_counter()
    with cpu.measure() as used:
        attempts, start, end = await run_clients(base_url, clients, seconds, body, headers)
    wall_s = time.perf_counter() - started
    commits_after, calls = await _database_work(dsn, since)
    for handle in handles:
        await drained(handle, DRAIN_S)
    return Arm(
        supervisors=supervisors,
        clients=clients,
        attempts=attempts,
        window=(start, end),
        wall_s=wall_s,
        cpu_s=dict(used),
        commits=commits_after - commits_before,
        calls=calls,
        busy_before=busy_before,
        phase_ms=await phases(dsn, attempts),
    )


def _measure() -> tuple[list[Arm], list[Arm]]:
    """The C-102 arms, and the wide DAG's."""
    from contextlib import ExitStack

    import ray

    measured: list[Arm] = []
    wide: list[Arm] = []
    with ExitStack() as stack:
        dsn, base_url = stack.enter_context(serve_runtime())
        key = secrets.token_bytes(32)
        mcp_url, tool_server_pid = stack.enter_context(tool_server_process(dsn, key))
        cpu = CpuMeter(dsn.rsplit("/", 1)[1].split("?")[0], 0, classify=partial(_classify, tool_server_pid))
        for round_ in range(ROUNDS):
            for clients in LEVELS:
                order = ARMS if round_ % 2 == 0 else tuple(reversed(ARMS))  # the load drifts: alternate
                for supervisors in order:
                    name = f"raydag-scale-{supervisors}-{clients}-{round_}"
                    handles = _deploy(dsn, base_url, mcp_url, key, name, supervisors)
                    arm = asyncio.run(_arm(dsn, base_url, handles, supervisors, clients, cpu))
                    for handle in handles:
                        ray.kill(handle)
                    measured.append(arm)
                    errors = dict(error_reasons(arm.attempts))
                    print(
                        f"[{supervisors} supervisors × {clients}] {arm.runs_per_s():.1f} runs/s, "
                        f"{arm.cpu_ms_per_run():.0f} ms CPU/run, errors {errors}",
                        flush=True,
                    )
            order = ARMS if round_ % 2 == 0 else tuple(reversed(ARMS))
            for supervisors in order:
                name = f"raydag-scale-{supervisors}-wide-{round_}"
                handles = _deploy(dsn, base_url, mcp_url, key, name, supervisors)
                arm = asyncio.run(_arm(dsn, base_url, handles, supervisors, WIDE_CLIENTS, cpu, wide=True))
                for handle in handles:
                    ray.kill(handle)
                wide.append(arm)
                errors = dict(error_reasons(arm.attempts))
                print(
                    f"[{supervisors} supervisors, wide] {arm.nodes_per_s():.0f} nodes/s, errors {errors}",
                    flush=True,
                )
    return measured, wide


def _median(arms: list[Arm], value: Any) -> float:
    return float(statistics.median(value(arm) for arm in arms))


def _report(arms: list[Arm]) -> None:
    grouped: dict[tuple[int, int], list[Arm]] = defaultdict(list)
    for arm in arms:
        grouped[(arm.clients, arm.supervisors)].append(arm)
    print(f"\n### Scale: supervisors side by side ({SECONDS:g} s per arm, {ROUNDS} rounds, medians)\n")
    print(
        "| clients | supervisors | runs/s | p50 ms | p99 ms | errors | CPU ms/run | "
        + " | ".join(ROLES)
        + " | PostgreSQL CPU ms/call | PostgreSQL transactions/call | cores busy |"
    )
    print("|---|---|---|---|---|---|---|" + "---|" * len(ROLES) + "---|---|---|")
    for (clients, supervisors), group in sorted(grouped.items()):
        latencies = [attempt.latency_ms for arm in group for attempt in arm.successes()]
        errors = sum(arm.errors() for arm in group)
        roles = " | ".join(
            f"{_median(group, lambda arm, r=role: arm.cpu_ms_per_run(r)):.1f}" for role in ROLES
        )
        pg_cpu = _median(group, lambda arm: arm.cpu_s.get("PostgreSQL", 0.0) * 1000 / max(1, arm.calls))
        print(
            f"| {clients} | {supervisors} | {_median(group, Arm.runs_per_s):.1f} "
            f"| {percentile(latencies, 0.5):.0f} | {percentile(latencies, 0.99):.0f} | {errors} "
            f"| {_median(group, Arm.cpu_ms_per_run):.1f} | {roles} | {pg_cpu:.2f} "
            f"| {_median(group, Arm.commits_per_call):.2f} | {_median(group, Arm.cores_busy):.2f} |"
        )
    print("\nCPU per run against one supervisor, the same clients (× of the one-supervisor arm):\n")
    for clients in LEVELS:
        base = grouped.get((clients, 1))
        if not base:
            continue
        one = _median(base, Arm.cpu_ms_per_run)
        ratios = ", ".join(
            f"{supervisors}: {_median(grouped[(clients, supervisors)], Arm.cpu_ms_per_run) / one:.2f}×"
            for supervisors in ARMS
            if (clients, supervisors) in grouped
        )
        print(f"- {clients} clients: {ratios}")
    print(
        "\n### Scale: admission and the start of a run (ms, median / p99 over every round's completed runs)\n\n"
        "The request until the supervisor has recorded the run, and from then until its first call is dispatched:\n"
    )
    print("| clients | supervisors | request → run created | created → first dispatch |")
    print("|---|---|---|---|")
    for (clients, supervisors), group in sorted(grouped.items()):
        cells = []
        for phase in ("request → run created", "created → first dispatch"):
            values = [value for arm in group for value in arm.phase_ms.get(phase, [])]
            cells.append(f"{percentile(values, 0.5):.0f} / {percentile(values, 0.99):.0f}" if values else "–")
        print(f"| {clients} | {supervisors} | {cells[0]} | {cells[1]} |")
    reasons: dict[str, int] = defaultdict(int)
    for arm in arms:
        for reason, count in error_reasons(arm.attempts).items():
            reasons[f"{arm.supervisors} supervisors × {arm.clients}: {reason}"] += count
    if reasons:
        print("\nErrors by reason:\n")
        for reason, count in sorted(reasons.items()):
            print(f"- {reason}: {count}")
    busy = ", ".join(f"{arm.supervisors}×{arm.clients}: {arm.busy_before:.0%}" for arm in arms)
    print(f"\nMachine busy just before each measured window (anyone's processes): {busy}.")


def _report_wide(arms: list[Arm]) -> None:
    grouped: dict[int, list[Arm]] = defaultdict(list)
    for arm in arms:
        grouped[arm.supervisors].append(arm)
    print(
        f"\n### Scale: a wide DAG ({WIDE_NODES} independent calls that answer at once, {WIDE_CLIENTS} clients, "
        f"{WIDE_SECONDS:g} s per arm, medians)\n"
    )
    print(
        "| supervisors | nodes/s | errors | CPU ms/node | supervisors CPU ms/node | tool calls CPU ms/node "
        "| PostgreSQL CPU ms/node | PostgreSQL transactions/node | cores busy |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for supervisors, group in sorted(grouped.items()):

        def per_node(arm: Arm, role: str | None = None) -> float:
            return arm.cpu_ms_per_run(role) / WIDE_NODES

        print(
            f"| {supervisors} | {_median(group, Arm.nodes_per_s):.0f} | {sum(arm.errors() for arm in group)} "
            f"| {_median(group, per_node):.2f} | {_median(group, lambda arm: per_node(arm, 'supervisors')):.2f} "
            f"| {_median(group, lambda arm: per_node(arm, 'tool calls')):.2f} "
            f"| {_median(group, lambda arm: per_node(arm, 'PostgreSQL')):.2f} "
            f"| {_median(group, Arm.commits_per_call):.2f} | {_median(group, Arm.cores_busy):.2f} |"
        )
    base = grouped.get(1)
    if base:
        one = _median(base, Arm.cpu_ms_per_run)
        ratios = ", ".join(
            f"{supervisors}: {_median(group, Arm.cpu_ms_per_run) / one:.2f}×"
            for supervisors, group in sorted(grouped.items())
        )
        print(f"\nCPU per node against one supervisor: {ratios}")
    reasons: dict[str, int] = defaultdict(int)
    for arm in arms:
        for reason, count in error_reasons(arm.attempts).items():
            reasons[f"{arm.supervisors} supervisors: {reason}"] += count
    for reason, count in sorted(reasons.items()):
        print(f"- {reason}: {count}")


def main() -> None:
    measured, wide = _measure()
    _report(measured)
    _report_wide(wide)

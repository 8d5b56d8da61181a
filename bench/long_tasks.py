"""``python -m bench long-tasks``: many concurrent long tool calls run as MCP tasks, against the same tool
called synchronously, side by side in one run.

The benchmark's own MCP server (``bench._wait_server``, a process of its own, over real Streamable HTTP on a
loopback port) offers two tools that do the same thing, wait ``SECONDS`` and answer: ``wait_task``
(``taskSupport: required``: started, then followed with ``tasks/get`` exchanges of at most 10 s, holding none
of the server's call slots) and ``wait_sync`` (one HTTP request held open for the whole wait). Both are declared
read-only in one toolsets file, the server with ``max_concurrency: 64``, what the shipped caseops server says
(the default is 16), and a ``call_s`` long enough for the synchronous calls' queue.

Each arm is **one run of ``TASKS`` independent nodes** of its tool (``max_parallel`` = ``TASKS``, at most
1,000), on a fresh ``RunSupervisor`` with its default executor (one ``ToolCaller`` actor): one run isolates
what the question is about, the calls in flight to one server, from what many runs would add on top (a
supervisor drives 64 runs at once and queues the rest; each run has its own planning and records), which would
bound both arms alike. Measured per arm: wall time from submission to the finished run; counted at the server,
the most MCP requests it had in flight at once, their request-seconds, the connections that carried them, when
the first and last ``tools/call`` arrived and the last result left, and (sampled every half second) its
established TCP connections; the caller's calls in flight (its slots held, sampled); CPU seconds by process
(``bench._cpu``), the supervisor's and the caller's also above their own idle rate (measured in a window
before the run: the synchronous arm lasts longer), and their peak resident memory (``VmHWM``, reset before).
Beside each arm's run, ``PROBE_AFTER_S`` in, a run of one instant ``wait_sync`` call on the same supervisor:
how long any other call waits while the arm's calls hold the caller.
"""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

from actors.run.submission import RunRequest, Submission
from actors.supervisor import NAMESPACE, SupervisorConfig, get_or_create_supervisor
from actors.toolsets.config import parse_toolsets
from bench._cpu import Classify, CpuMeter
from bench._harness import fresh_database, server_process
from bench._ray import local_ray
from bench._smoke import sized
from bench._wait_server import POLL_MS, SYNC_TOOL, TASK_TOOL, serve
from dag.budget import Budgets
from dag.policy import Principal

TASKS = int(os.environ.get("BENCH_LONG_TASKS", sized(500, 3)))
SECONDS = float(os.environ.get("BENCH_LONG_TASKS_SECONDS", sized(30.0, 1.0)))
MAX_CONCURRENCY = 64
"""The server's ``max_concurrency`` in the toolsets file: the synchronous arm's bound, with the caller's own."""
CALL_S = min(3600.0, (math.ceil(TASKS / MAX_CONCURRENCY) + 1) * SECONDS + 30)
"""Both tools' ``call_s``: the last synchronous call waits for every wave before it, under its timeout."""
SAMPLE_S = 0.5
IDLE_S = sized(10.0, 1.0)
"""The window, before each arm's run, in which its supervisor and caller have nothing to do: their CPU per
second then is what the arm's run is measured above (the synchronous arm lasts longer)."""
PROBE_AFTER_S = sized(15.0, 0.3)
"""When, after the arm's run was submitted, a run of one instant call of ``wait_sync`` is submitted beside it:
how long another call of the same supervisor waits while the arm's calls are out."""
SCOPE = "bench:read"
PRINCIPAL = Principal("tenant-demo", "bench", frozenset({SCOPE}))


def toolsets_text(url: str) -> str:
    return f"""\
servers:
  - name: wait
    transport: streamable-http
    url: {url}
    protocol: 2025-11-25
    max_concurrency: {MAX_CONCURRENCY}
    timeouts: {{connect_s: 30, call_s: {CALL_S:g}}}
    tools:
      {TASK_TOOL}: {{scope: {SCOPE}, risk: read_only}}
      {SYNC_TOOL}: {{scope: {SCOPE}, risk: read_only}}
"""


def plan(tool: str) -> dict[str, Any]:
    """``TASKS`` independent calls of ``tool``, each with arguments of its own (one action is not repeated)."""
    nodes = [
        {"id": f"n{index}", "tool": tool, "args": {"seconds": SECONDS, "n": index}} for index in range(TASKS)
    ]
    return {"nodes": nodes}


def classify(server_pid: int) -> Classify:
    """CPU roles: the supervisor, its caller, the tool server, PostgreSQL, and the rest."""

    def role(process: psutil.Process, title: str) -> str:
        if process.pid == server_pid:
            return "tool server"
        if title.startswith("postgres"):
            return "PostgreSQL"
        if title.startswith("ray::RunSupervisor"):
            return "supervisor"
        if title.startswith("ray::ToolCaller"):
            return "caller"
        return "other"

    return role


def _status_kb(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise KeyError(field_name)


def _reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # VmHWM back to the current RSS


@dataclass
class Arm:
    """What one arm measured."""

    tool: str
    wall_s: float = 0.0
    cpu: dict[str, float] = field(default_factory=dict)
    idle_cpu_per_s: dict[str, float] = field(default_factory=dict)
    submitted_at: float = 0.0
    probe_s: float = 0.0
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    peak_connections: int = 0
    peak_caller_calls: int = 0
    events: int = 0
    attempts: int = 0
    machine_busy: float = 0.0
    """The fraction of the whole machine's CPU time busy during the arm, by anyone."""


def _machine_times() -> tuple[float, float]:
    times = psutil.cpu_times()
    return sum(times), times.idle + times.iowait


async def _sample(arm: Arm, caller: Any, server_pid: int, port: int, stop: asyncio.Event) -> None:
    """Every ``SAMPLE_S``: the server's established connections on its port, the caller's calls in flight."""
    server = psutil.Process(server_pid)
    while not stop.is_set():
        connections = [
            c
            for c in server.net_connections(kind="tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
        ]
        arm.peak_connections = max(arm.peak_connections, len(connections))
        arm.peak_caller_calls = max(arm.peak_caller_calls, int((await caller.ping.remote())["in_flight"]))
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([stopped], timeout=SAMPLE_S)
        stopped.cancel()


async def _records(dsn: str, run_id: str) -> tuple[str, int, int]:
    connection = await asyncpg.connect(dsn)
    try:
        status = await connection.fetchval("SELECT status FROM runs WHERE run_id = $1::uuid", run_id)
        events = await connection.fetchval("SELECT count(*) FROM run_events WHERE run_id = $1::uuid", run_id)
        attempts = await connection.fetchval(
            "SELECT count(*) FROM tool_ledger WHERE run_id = $1::uuid AND status = 'succeeded'", run_id
        )
        ledger = await connection.fetchval("SELECT count(*) FROM tool_ledger WHERE run_id = $1::uuid", run_id)
        if attempts != TASKS:
            raise RuntimeError(f"run {run_id}: {attempts} of {TASKS} calls succeeded")
        return str(status), int(events), int(ledger)
    finally:
        await connection.close()


async def _probe(supervisor: Any) -> float:
    """``PROBE_AFTER_S`` in, a run of one instant ``wait_sync`` call: seconds from its submission to its end."""
    await asyncio.sleep(PROBE_AFTER_S)
    nodes = [{"id": "probe", "tool": SYNC_TOOL, "args": {"seconds": 0, "n": -1, "probe": True}}]
    started = time.perf_counter()
    request = RunRequest(principal=PRINCIPAL, resource={}, plan={"nodes": nodes}, planner="outputs")
    submitted = await supervisor.submit.remote(request)
    if submitted.run_id is None or not await supervisor.wait.remote(submitted.run_id, CALL_S * 2 + 60):
        raise RuntimeError(f"the probe run did not finish: {submitted}")
    return time.perf_counter() - started


async def run_arm(tool: str, config: SupervisorConfig, meter: CpuMeter, server: tuple[str, int]) -> Arm:
    """One run of ``TASKS`` calls of ``tool`` on a supervisor of its own, measured."""
    import ray

    url, server_pid = server
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    name = f"raydag-bench-long-{tool}-{secrets.token_hex(2)}"
    supervisor = get_or_create_supervisor(config, name=name, detached=False)
    arm = Arm(tool)
    try:
        ping = await supervisor.ping.remote()
        contract = (await supervisor.contracts.remote())[tool]
        if contract.task is not (tool == TASK_TOOL):
            raise RuntimeError(f"{tool} is offered with task={contract.task}")
        [(caller_name, caller_ping)] = (await supervisor.callers.remote()).items()
        caller = ray.get_actor(caller_name, namespace=NAMESPACE)
        pids = {"supervisor": int(ping["pid"]), "caller": int(caller_ping["pid"])}
        for pid in pids.values():
            _reset_peak(pid)
        async with httpx.AsyncClient(base_url=url.removesuffix("/mcp")) as stats:
            stop = asyncio.Event()
            with meter.measure() as idle:
                await asyncio.sleep(IDLE_S)
            arm.idle_cpu_per_s = {role: seconds / IDLE_S for role, seconds in idle.items()}
            (await stats.post("/stats/reset")).raise_for_status()
            total_before, idle_before = _machine_times()
            with meter.measure() as used:
                started = time.perf_counter()
                arm.submitted_at = time.time()
                request = RunRequest(principal=PRINCIPAL, resource={}, plan=plan(tool), planner="outputs")
                submitted = await supervisor.submit.remote(request)
                if submitted.outcome is not Submission.CREATED or submitted.run_id is None:
                    raise RuntimeError(f"the {tool} run was not created: {submitted}")
                sampler = asyncio.create_task(_sample(arm, caller, server_pid, port, stop))
                probe = asyncio.create_task(_probe(supervisor))
                finished = await supervisor.wait.remote(submitted.run_id, CALL_S * 2 + 60)
                arm.wall_s = time.perf_counter() - started
                stop.set()
                await sampler
                arm.probe_s = await probe
            total_after, idle_after = _machine_times()
            arm.machine_busy = 1 - (idle_after - idle_before) / max(total_after - total_before, 1e-9)
            arm.server = (await stats.get("/stats")).json()
        if not finished:
            raise RuntimeError(f"the {tool} run did not finish")
        arm.cpu = dict(used)
        arm.peak_rss_mb = {role: _status_kb(pid, "VmHWM") / 1024 for role, pid in pids.items()}
        status, arm.events, arm.attempts = await _records(config.dsn, str(submitted.run_id))
        if status != "completed":
            raise RuntimeError(f"the {tool} run ended {status}")
    finally:
        ray.kill(supervisor)
    return arm


def _after(arm: Arm, *moments: float) -> str:
    return " / ".join(f"{moment - arm.submitted_at:.1f}" for moment in moments)


def _cpu(arm: Arm, role: str) -> str:
    """CPU seconds in the arm, and (after the slash) above what the process spent idle for as long."""
    used = arm.cpu.get(role, 0.0)
    above = max(0.0, used - arm.idle_cpu_per_s.get(role, 0.0) * arm.wall_s)  # noise can put it below
    return f"{used:.1f} / {above:.1f}"


def report(arms: list[Arm]) -> None:
    print(
        f"\n### Long tool calls: {TASKS} concurrent calls of {SECONDS:g} s, as MCP tasks and synchronously\n"
    )
    labels = {TASK_TOOL: "MCP task", SYNC_TOOL: "synchronous"}
    print("| measurement | " + " | ".join(labels[arm.tool] for arm in arms) + " |")
    print("|---|" + "---|" * len(arms))
    rows: list[tuple[str, Any]] = [
        ("wall time, s", lambda a: f"{a.wall_s:.1f}"),
        (f"wall time ÷ the call's {SECONDS:g} s", lambda a: f"{a.wall_s / SECONDS:.2f}"),
        ("caller's calls in flight, peak (sampled)", lambda a: f"{a.peak_caller_calls}"),
        ("server: MCP requests in flight, peak", lambda a: f"{a.server['peak_in_flight']}"),
        (
            f"an instant call's run, submitted {PROBE_AFTER_S:g} s in: s to its end",
            lambda a: f"{a.probe_s:.2f}",
        ),
        ("server: request-seconds held", lambda a: f"{a.server['request_s']:.0f}"),
        ("server: TCP connections established, peak (sampled)", lambda a: f"{a.peak_connections}"),
        ("server: client connections used", lambda a: f"{a.server['connections_used']}"),
        (
            "server: first and last `tools/call` arrived, s after submission",
            lambda a: _after(a, *a.server["calls"]),
        ),
        ("server: last result answered, s after submission", lambda a: _after(a, a.server["last_answer"])),
        ("server: requests", lambda a: f"{sum(a.server['methods'].values())}"),
        ("server: `tasks/get` requests", lambda a: f"{a.server['methods'].get('tasks/get', 0)}"),
        ("supervisor CPU, s", lambda a: _cpu(a, "supervisor")),
        ("caller CPU, s", lambda a: _cpu(a, "caller")),
        ("tool server CPU, s", lambda a: f"{a.cpu.get('tool server', 0.0):.1f}"),
        ("PostgreSQL CPU, s", lambda a: f"{a.cpu.get('PostgreSQL', 0.0):.1f}"),
        ("supervisor peak RSS, MB", lambda a: f"{a.peak_rss_mb['supervisor']:.0f}"),
        ("caller peak RSS, MB", lambda a: f"{a.peak_rss_mb['caller']:.0f}"),
        ("run events recorded", lambda a: f"{a.events}"),
        ("attempts (ledger rows)", lambda a: f"{a.attempts}"),
        ("whole machine busy (by anyone), %", lambda a: f"{a.machine_busy * 100:.0f}"),
    ]
    for label, value in rows:
        print(f"| {label} | " + " | ".join(value(arm) for arm in arms) + " |")
    print(
        f"\nOne run of {TASKS} nodes per arm, `max_parallel` {min(TASKS, 1000)}; server `max_concurrency` "
        f"{MAX_CONCURRENCY}, `call_s` {CALL_S:g}; the tool server asks for `pollInterval` {POLL_MS} ms. "
        f"Supervisor and caller CPU: in all / above their own idle rate (measured over {IDLE_S:g} s before "
        "the run) for as long as the arm lasted."
    )


def main() -> None:
    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        # The tool server in a process of its own: no GIL shared with anything measured.
        server = stack.enter_context(server_process(serve, (), name="bench-wait-server"))
        stack.enter_context(local_ray(namespace="raydag", num_cpus=8, log_to_driver=False))
        config = SupervisorConfig(
            dsn=dsn,
            mcp_url=server[0],
            token_key=secrets.token_bytes(32),
            limits=Budgets(
                max_nodes=max(TASKS, 64), max_parallel=min(TASKS, 1000), deadline_s=CALL_S * 2 + 60
            ),
            toolsets=parse_toolsets(toolsets_text(server[0] + "/mcp"), "long-tasks.yaml", {}),
        )
        meter = CpuMeter(dsn.rsplit("/", 1)[-1].split("?")[0], server[1], classify(server[1]))
        arms: list[Arm] = []
        for tool in (TASK_TOOL, SYNC_TOOL):
            arms.append(asyncio.run(run_arm(tool, config, meter, (server[0] + "/mcp", server[1]))))
    report(arms)

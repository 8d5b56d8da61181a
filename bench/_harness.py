"""The real runtime, brought up for the DAG benchmarks, and the two other ways of running a DAG beside it.

- ``raydag``: the production path. A ``BenchSupervisor`` Ray actor hosts a ``RunService`` (as the
  ``RunSupervisor`` does) with ``RayToolExecutor``: every node is validated, authorized, recorded in
  PostgreSQL and run as a Ray task calling ``bench_wait`` over MCP with a task token of its own
  (``bench._executors`` has the other executors the supervisor can use instead).
- ``waves``: the benchmark process gathers each ready layer with asyncio (``Shape.layers``).
- ``langgraph``: a LangGraph ``StateGraph`` with one node per DAG node and an edge per dependency.

Every arm calls the same MCP tool server (a process of its own) through ``actors.calls.mcp.call_tool`` with a
freshly minted task token, so only the scheduling differs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import multiprocessing
import os
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Annotated, Any, TypedDict

import asyncpg
import ray

from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections, call_tool
from actors.launch.background_server import BackgroundServer
from actors.launch.settings import Settings
from actors.run.deps import RunDeps, ToolEndpoint
from actors.run.service import RunService
from actors.run.submission import RunRequest, Submission
from actors.store.database import (
    create_pool,
    drop_database,
    embedded_postgres,
    ensure_database,
    with_database,
)
from bench._cpu import CpuMeter
from bench._executors import EXECUTORS
from bench._ray import local_ray
from bench._synthetic import (
    BENCH_WAIT,
    CASE_ID,
    CATALOGUE,
    SCOPE,
    TENANT,
    JoinOnlyPlanner,
    Node,
    Shape,
    call_args,
    wait_handler,
)
from dag.budget import BudgetRequest, Budgets
from dag.policy import Principal
from dag.refs import resolve_pointer
from dag.tokens import TaskTokens
from mcp_server.config import ToolServerConfig
from mcp_server.server import MCP_PATH, ToolServer
from planner.base import Planner
from planner.openai_planner import OpenAIPlanner, OpenAISettings
from planner.registry import MODEL_PLANNER
from tests.caseops import prepare_caseops_database

LIMITS = Budgets(max_nodes=2_000, max_fanout=2_000, max_parallel=64, deadline_s=600, max_replans=20)
"""The server's limits for benchmark runs: room for the widest DAG (the default ``max_parallel`` is 16) and for
a model-planned run's rounds (``bench.agents``)."""
PRINCIPAL = Principal(tenant_id=TENANT, subject="bench", scopes=frozenset({SCOPE}))


DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


def langgraph_installed() -> bool:
    """Whether LangGraph, of the ``bench`` extra (``make bench`` installs it), can be imported."""
    return importlib.util.find_spec("langgraph") is not None


def _admin_dsn(stack: ExitStack) -> str:
    """``RAYDAG_DATABASE_URL``'s server, else the machine's PostgreSQL on 5432, else the embedded one."""
    settings = Settings()
    if settings.database_url is not None:
        return settings.database_url.get_secret_value()

    async def reachable() -> bool:
        try:
            connection = await asyncpg.connect(DEFAULT_ADMIN_DSN, timeout=3)
        except (OSError, asyncpg.PostgresError):
            return False
        await connection.close()
        return True

    if asyncio.run(reachable()):
        return DEFAULT_ADMIN_DSN
    return with_database(stack.enter_context(embedded_postgres(settings.home_dir / "bench")), "postgres")


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new migrated and seeded database, dropped on exit."""
    with ExitStack() as stack:
        admin = _admin_dsn(stack)
        name = f"raydag_bench_{secrets.token_hex(3)}"
        asyncio.run(ensure_database(admin, name))
        stack.callback(lambda: asyncio.run(drop_database(admin, name)))
        dsn = with_database(admin, name)
        asyncio.run(prepare_caseops_database(dsn))
        yield dsn


def _serve_tools(dsn: str, key: bytes, latency_ms: int, control: Connection) -> None:
    """The tool server's process: caseops plus ``bench_wait``, until the parent says stop."""
    http = BackgroundServer()
    url = http.url + MCP_PATH
    server = ToolServer(
        ToolServerConfig(dsn=dsn, tokens=TaskTokens(key=key, audience=url), latency_ms=latency_ms),
        extra_tools=[(BENCH_WAIT, wait_handler)],
    )
    http.start(server.asgi_app())
    control.send(url)
    control.recv()
    http.stop()


@contextmanager
def tool_server_process(dsn: str, key: bytes, *, latency_ms: int = 0) -> Iterator[tuple[str, int]]:
    """The MCP tool server in a process of its own, so no arm shares an interpreter (or its GIL) with it;
    ``latency_ms`` simulates the upstream system behind each caseops tool."""
    with server_process(_serve_tools, (dsn, key, latency_ms), name="bench-tools") as served:
        yield served


@contextmanager
def server_process(
    target: Callable[..., None], args: tuple[Any, ...], *, name: str
) -> Iterator[tuple[str, int]]:
    """``target(*args, control)`` in a spawned process: it sends its URL over ``control`` once it serves, and
    stops when told. Yields the URL and the process's pid."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(*args, theirs), daemon=True, name=name)
    process.start()
    try:
        if not ours.poll(60):
            raise RuntimeError(f"{name} did not start within 60 s")
        yield ours.recv(), process.pid or 0
    finally:
        ours.send("stop")
        process.join(15)
        if process.is_alive():
            process.kill()


@dataclass(frozen=True)
class RunTimes:
    """One raydag run, timed by the supervisor's clock and its records."""

    run_id: str
    e2e_ms: float
    """From ``submit`` (run created, plan validated) until ``wait`` returned the finished run."""
    makespan_ms: float
    """From the first node's dispatch to the last node's success being recorded."""
    calls_ms: float
    """Sum over nodes of the time inside the tool call (worker clock: MCP request and the tool itself)."""
    cpu_s: float
    """CPU time the supervisor's process spent during the run."""
    peak_rss_growth_mb: float
    """How far the supervisor's resident memory rose above its level at the start of the run."""
    nodes: list[dict[str, Any]]
    """Per node, in dispatch order: ms from the run's first dispatch to dispatch, start, finish, recorded."""


def _ms(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds() * 1000


def _proc_status(field: str) -> int:
    """A ``/proc/self/status`` memory line, in kB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def _reset_peak_rss() -> None:
    """Reset this process's ``VmHWM`` (peak resident set size) to its current size."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


class BenchSupervisor:
    """What ``RunSupervisor`` hosts, with the benchmark's tool catalogue and planner, plus instruments."""

    def __init__(self, dsn: str, mcp_url: str, key: bytes, model_url: str | None = None) -> None:
        self._dsn = dsn
        self._mcp_url = mcp_url
        self._key = key
        self._model_url = model_url
        self._services: dict[str, RunService] = {}
        self._reader: Any = None

    def _planners(self) -> dict[str, Planner]:
        """The join-only planner; with a model endpoint, the model planner (``openai``) over it too."""
        planners: dict[str, Planner] = {"bench": JoinOnlyPlanner()}
        if self._model_url is not None:
            settings = OpenAISettings(api_key="sk-bench", base_url=self._model_url, model="gpt-bench")
            planners[MODEL_PLANNER] = OpenAIPlanner(settings)
        return planners

    async def _service(self, executor: str) -> RunService:
        if executor not in self._services:
            deps = RunDeps(
                executor=EXECUTORS[executor](),
                catalogue=CATALOGUE,
                planners=self._planners(),
                endpoint=ToolEndpoint(
                    url=self._mcp_url, tokens=TaskTokens(key=self._key, audience=self._mcp_url)
                ),
            )
            self._services[executor] = RunService(
                deps, pool=await create_pool(self._dsn, max_size=4), limits=LIMITS
            )
        if self._reader is None:
            self._reader = await create_pool(self._dsn, max_size=1)
        return self._services[executor]

    def pid(self) -> int:
        return os.getpid()

    async def run(
        self, plan: dict[str, Any], max_parallel: int | None = None, executor: str = "mcp"
    ) -> RunTimes:
        budgets = BudgetRequest(max_parallel=max_parallel) if max_parallel else None
        request = RunRequest(
            principal=PRINCIPAL, resource={"case_id": CASE_ID}, planner="bench", plan=plan, budgets=budgets
        )
        _reset_peak_rss()
        rss_before = _proc_status("VmRSS")
        cpu_before = time.process_time()
        started = time.perf_counter()
        run_id = await self.submit_and_wait(request, executor)
        e2e_ms = (time.perf_counter() - started) * 1000
        cpu_s = time.process_time() - cpu_before
        peak_growth_mb = (_proc_status("VmHWM") - rss_before) / 1024
        return await self._times(run_id, e2e_ms, cpu_s, peak_growth_mb)

    async def submit_and_wait(self, request: RunRequest, executor: str = "callers") -> str:
        """Run ``request`` to its end; its id."""
        service = await self._service(executor)
        submitted = await service.submit(request)
        if submitted.outcome is not Submission.CREATED or submitted.run_id is None:
            raise RuntimeError(f"benchmark run not created: {submitted}")
        if not await service.wait(submitted.run_id, timeout_s=600):
            raise RuntimeError(f"run {submitted.run_id} did not finish in 600 s")
        return submitted.run_id

    async def _times(self, run_id: str, e2e_ms: float, cpu_s: float, peak_growth_mb: float) -> RunTimes:
        key = uuid.UUID(run_id)
        run = await self._reader.fetchrow(
            "SELECT status, stop_reason, detail FROM runs WHERE run_id = $1", key
        )
        status = run["status"]
        ledger = await self._reader.fetch(
            "SELECT node_id, status, dispatched_at, started_at, finished_at FROM tool_ledger WHERE run_id = $1",
            key,
        )
        recorded = {
            row["node_id"]: datetime.fromisoformat(row["at"])
            for row in await self._reader.fetch(
                "SELECT node_id, data->>'at' AS at FROM run_events WHERE run_id = $1 AND kind = 'node_succeeded'",
                key,
            )
        }
        failed = [row["node_id"] for row in ledger if row["status"] != "succeeded"]
        if status != "completed" or failed:
            raise RuntimeError(
                f"run {run_id} ended {status} ({run['stop_reason']}: {run['detail']});"
                f" nodes not succeeded: {failed[:5]}"
            )
        first = min(row["dispatched_at"] for row in ledger)
        last = max(recorded.values())
        nodes = [
            {
                "node_id": row["node_id"],
                "dispatched": _ms(row["dispatched_at"], first),
                "started": _ms(row["started_at"], first),
                "finished": _ms(row["finished_at"], first),
                "recorded": _ms(recorded[row["node_id"]], first),
            }
            for row in sorted(ledger, key=lambda row: row["dispatched_at"])
        ]
        return RunTimes(
            run_id=run_id,
            e2e_ms=e2e_ms,
            makespan_ms=_ms(last, first),
            calls_ms=sum(node["finished"] - node["started"] for node in nodes),
            cpu_s=cpu_s,
            peak_rss_growth_mb=peak_growth_mb,
            nodes=nodes,
        )


class Bench:
    """Everything the DAG benchmarks need, up for the duration of a ``with`` block.

    Use it from one event loop: the in-process arms keep one ``McpConnections`` (keep-alive HTTP, one SDK
    client), as each Ray worker does for its tool tasks.
    """

    def __init__(self, dsn: str, mcp_url: str, key: bytes, supervisor: Any, cpu: CpuMeter) -> None:
        self.dsn = dsn
        self.cpu = cpu
        self.mcp_url = mcp_url
        self.tokens = TaskTokens(key=key, audience=mcp_url)
        self.supervisor = supervisor
        self._connections: McpConnections | None = None

    async def raydag(self, shape: Shape, max_parallel: int | None = None, executor: str = "mcp") -> RunTimes:
        times: RunTimes = await self.supervisor.run.remote(shape.plan(), max_parallel, executor)
        return times

    async def call(self, node: Node, upstream: list[Any]) -> Any:
        """One call of ``bench_wait`` as the supervisor would make it: its own token, the same client."""
        token = self.tokens.mint(
            subject=PRINCIPAL.subject,
            tenant_id=TENANT,
            task_id=f"bench/{node.id}/1",
            resource={"case_id": CASE_ID},
            tool=BENCH_WAIT.name,
            scopes={SCOPE},
        )
        if self._connections is None:
            self._connections = McpConnections()
        call = ToolCall(
            "bench", node.id, 1, BENCH_WAIT.name, call_args(node, upstream), self.mcp_url, token, 60.0
        )
        outcome = await call_tool(call, CATALOGUE, self._connections)
        if not outcome.ok:
            raise RuntimeError(f"{node.id} failed: {outcome.error}")
        return outcome.output

    async def waves(self, shape: Shape, limit: int | None = None) -> float:
        """Gather each layer (at most ``limit`` calls at once), wait for all of it, then the next: ms in all."""
        gate = asyncio.Semaphore(limit or len(shape.nodes))

        async def call(node: Node, outputs: dict[str, Any]) -> Any:
            async with gate:
                return await self.call(
                    node, [resolve_pointer(outputs[dep], node.reads, node_id=dep) for dep in node.deps]
                )

        started = time.perf_counter()
        outputs: dict[str, Any] = {}
        for layer in shape.layers():
            results = await asyncio.gather(*(call(node, outputs) for node in layer))
            outputs.update(zip((node.id for node in layer), results, strict=True))
        return (time.perf_counter() - started) * 1000

    def langgraph(self, shape: Shape) -> Any:
        """The DAG as a compiled LangGraph graph: run it with ``run_langgraph``."""
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(_GraphState)
        for node in shape.nodes:
            graph.add_node(node.id, self._graph_node(node))
        dependents = {dep for node in shape.nodes for dep in node.deps}
        for node in shape.nodes:
            if not node.deps:
                graph.add_edge(START, node.id)
            elif len(node.deps) == 1:
                graph.add_edge(node.deps[0], node.id)
            else:
                graph.add_edge(list(node.deps), node.id)  # waits for all of them
            if node.id not in dependents:
                graph.add_edge(node.id, END)
        return graph.compile()

    def _graph_node(self, node: Node) -> Any:
        async def run(state: _GraphState) -> dict[str, Any]:
            outputs = state["outputs"]
            upstream = [resolve_pointer(outputs[dep], node.reads, node_id=dep) for dep in node.deps]
            return {"outputs": {node.id: await self.call(node, upstream)}}

        return run

    async def close(self) -> None:
        if self._connections is not None:
            await self._connections.aclose()
            self._connections = None

    @staticmethod
    async def run_langgraph(compiled: Any) -> float:
        started = time.perf_counter()
        await compiled.ainvoke({"outputs": {}}, config={"recursion_limit": 10_000})
        return (time.perf_counter() - started) * 1000


def _merge(left: dict[str, Any], right: dict[str, Any]) -> dict[str, Any]:
    return {**left, **right}


class _GraphState(TypedDict):
    outputs: Annotated[dict[str, Any], _merge]


@contextmanager
def bench_runtime(model_url: str | None = None) -> Iterator[Bench]:
    """A fresh database, the tool server process, a local Ray (8 logical CPUs) and the supervisor actor (with
    the model planner over ``model_url``, if given)."""
    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        key = secrets.token_bytes(32)
        mcp_url, tool_server_pid = stack.enter_context(tool_server_process(dsn, key))
        # log_to_driver=False keeps the Markdown on stdout clean; workers' logs stay under /tmp/ray.
        stack.enter_context(local_ray(num_cpus=8, log_to_driver=False))
        supervisor: Any = (
            ray.remote(BenchSupervisor)
            .options(num_cpus=0, max_concurrency=1000, name="raydag-bench-supervisor")
            .remote(dsn, mcp_url, key, model_url)
        )
        stack.callback(ray.kill, supervisor)
        cpu = CpuMeter(dsn.rsplit("/", 1)[1].split("?")[0], tool_server_pid)
        yield Bench(dsn, mcp_url, key, supervisor, cpu)

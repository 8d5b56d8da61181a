"""The API while a dependency is away: its supervisor killed and restarting, or PostgreSQL not answering.

Each answer is a 503 with ``Retry-After`` that comes within the API's deadline (the client's timeout here is
a few seconds: a route that hangs fails the test), accepts nothing twice, and loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import shipped_toolsets
from actors.supervisor import NAMESPACE
from dag.budget import Budgets
from mcp_server.planner import ConformancePlanner
from planner.base import PlanningContext
from tests.integration.conftest import DEMO_KEY, TEST_API_KEYS, RunningToolServer, auth
from tests.loopback import wait_until_ok

GATE_PREFIX = "gate:"
GATED_PLANNER = "tests.integration.test_api_supervisor_restart:GatedPlanner"
CLIENT_TIMEOUT_S = 4.0
"""Above the API's 2 s promise with room for a loaded machine; a request that hangs fails at this."""
C102_TOOLS = (
    "caseops_get_case_snapshot",
    "caseops_get_policy_requirements",
    "caseops_list_unclassified_documents",
    "caseops_resolve_document_alias",
)


class GatedPlanner(ConformancePlanner):
    """The conformance planner, proposing only once the file its goal names exists: until the test opens
    that gate no tool call is dispatched, so killing the supervisor can never leave one in flight."""

    name = "gated"

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        gate = Path(context.goal.removeprefix(GATE_PREFIX))
        while not await asyncio.to_thread(gate.exists):  # noqa: ASYNC110 - the gate is another process's file
            await asyncio.sleep(0.05)
        return await super().propose(context)


def api_config(dsn: str, mcp_url: str, token_key: bytes, **supervisor: Any) -> Any:
    """The API's configuration; ``supervisor`` overrides ``SupervisorConfig`` fields."""
    from actors.api.app import ApiConfig
    from actors.supervisor import SupervisorConfig

    return ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=mcp_url,
            token_key=token_key,
            **{"limits": Budgets(), "toolsets": shipped_toolsets(mcp_url), **supervisor},
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=f"raydag-test-outage-{uuid.uuid4().hex[:8]}",
    )


@pytest.fixture
def serve_api() -> Iterator[Any]:
    """Start ``create_app(config)`` on loopback; stop it, and its detached supervisor, afterwards."""
    import ray

    from actors.api.app import create_app

    started: list[tuple[BackgroundServer, tuple[str, ...]]] = []

    def start(config: Any, *, ready: str = "/readyz") -> str:
        """The API's URL once ``ready`` answers 200 (``/healthz`` for one whose toolset server is down)."""
        http = BackgroundServer().start(create_app(config), timeout_s=60)
        started.append((http, config.supervisor_names))
        # In service once ready, as behind a load balancer: its supervisor has listed its tools.
        wait_until_ok(http.url + ready, within_s=60)
        return http.url

    yield start
    for http, supervisors in started:
        http.stop()
        for supervisor in supervisors:
            with contextlib.suppress(ValueError):  # a test may have killed it for good already
                ray.kill(ray.get_actor(supervisor, namespace=NAMESPACE), no_restart=True)


async def count_runs(dsn: str, idempotency_key: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval(
            "SELECT count(*) FROM runs WHERE idempotency_key = $1", idempotency_key
        )
        return count
    finally:
        await connection.close()


def assert_unavailable(response: httpx.Response, slug: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == f"https://raydag.dev/problems/{slug}"
    assert int(response.headers["retry-after"]) >= 1


# ------------------------------------------------------------------ C1: the supervisor killed mid-request


async def test_killing_the_supervisor_among_idempotent_requests_gives_one_run_whose_tools_run_once(
    ray_cluster: None,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,
    tmp_path: Path,
) -> None:
    import ray

    tools: RunningToolServer = start_tool_server()
    config = api_config(scratch_dsn, tools.url, token_key, planners=(GATED_PLANNER,))
    base = serve_api(config)
    supervisor = ray.get_actor(config.supervisor_name, namespace=NAMESPACE)
    first_pid = (await supervisor.ping.remote())["pid"]
    gate = tmp_path / "gate"
    key = f"outage-{uuid.uuid4()}"
    body = {"case_id": "C-102", "planner": "gated", "goal": f"{GATE_PREFIX}{gate}"}
    headers = {**auth(DEMO_KEY), "Idempotency-Key": key}

    async with httpx.AsyncClient(base_url=base, timeout=CLIENT_TIMEOUT_S) as client:

        async def submit() -> httpx.Response:
            return await client.post("/runs", json=body, headers=headers)

        before_kill = [asyncio.create_task(submit()) for _ in range(5)]
        await asyncio.wait(before_kill, return_when=asyncio.FIRST_COMPLETED)  # one answered: the run exists
        ray.kill(supervisor, no_restart=False)
        after_kill = [asyncio.create_task(submit()) for _ in range(5)]
        answers = await asyncio.gather(*before_kill, *after_kill)

        run_ids = set()
        for answer in answers:
            if answer.status_code in (200, 201):
                run_ids.add(answer.json()["run_id"])
            else:
                assert_unavailable(answer, "supervisor-unavailable")
        assert len(run_ids) <= 1, run_ids

        retried = await submit()
        for _ in range(60):
            if retried.status_code != 503:
                break
            assert_unavailable(retried, "supervisor-unavailable")
            await asyncio.sleep(float(retried.headers["retry-after"]))
            retried = await submit()
        assert retried.status_code in (200, 201), retried.text
        run_id = retried.json()["run_id"]
        assert run_ids <= {run_id}

        assert (await supervisor.ping.remote())["pid"] != first_pid  # it was killed and restarted
        gate.touch()
        run = retried.json()
        for _ in range(240):
            run = (await client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY))).json()
            if run["finished_at"] is not None:
                break
            await asyncio.sleep(0.25)

    assert run["status"] == "completed", run
    assert await count_runs(scratch_dsn, key) == 1
    assert tools.server.executions == {("tenant-demo", "C-102", tool): 1 for tool in C102_TOOLS}


# ------------------------------------------------------------------ C2: PostgreSQL not answering


class PartitionProxy:
    """A TCP proxy to PostgreSQL that can stop answering: connections stay open and new ones are accepted,
    but nothing passes either way while it is cut (a network partition: nothing fails, everything waits)."""

    def __init__(self, dsn: str) -> None:
        parts = urlsplit(dsn)
        socket_dir = parse_qs(parts.query).get("host", [""])[0]
        port = parts.port or int(parse_qs(parts.query).get("port", ["5432"])[0])
        # The embedded server listens on a Unix socket in its data dir (``?host=/dir``); others on TCP.
        self._socket = f"{socket_dir}/.s.PGSQL.{port}" if socket_dir.startswith("/") else None
        self._upstream = (parts.hostname or "127.0.0.1", port)
        self._loop = asyncio.new_event_loop()
        self._open = asyncio.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="pg-partition-proxy")
        self._thread.start()
        assert self._ready.wait(10), "the proxy did not start"
        self.dsn = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{self._port}", query=""))

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._open.set()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", 0))
        self._port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await self._open.wait()
        if self._socket is not None:
            server_reader, server_writer = await asyncio.open_unix_connection(self._socket)
        else:
            server_reader, server_writer = await asyncio.open_connection(*self._upstream)
        await asyncio.gather(
            self._pipe(client_reader, server_writer),
            self._pipe(server_reader, client_writer),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._open.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    def cut(self) -> None:
        self._loop.call_soon_threadsafe(self._open.clear)

    def restore(self) -> None:
        self._loop.call_soon_threadsafe(self._open.set)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self._loop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def partition(scratch_dsn: str) -> Iterator[PartitionProxy]:
    proxy = PartitionProxy(scratch_dsn)
    yield proxy
    proxy.restore()
    proxy.close()


async def test_while_postgresql_does_not_answer_each_route_is_a_503_and_accepts_nothing(
    ray_cluster: None,
    scratch_dsn: str,
    partition: PartitionProxy,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,
) -> None:
    base = serve_api(api_config(partition.dsn, tool_server.url, token_key))
    key = f"partition-{uuid.uuid4()}"
    async with httpx.AsyncClient(base_url=base, timeout=CLIENT_TIMEOUT_S) as client:
        run = await client.post(  # before the partition: the first run may start tool callers (seconds)
            "/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY), timeout=90
        )
        assert run.status_code == 201, run.text
        run_path = f"/runs/{run.json()['run_id']}"

        partition.cut()
        submitted, *reads = await asyncio.gather(
            client.post(
                "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": key}
            ),
            client.get(run_path, headers=auth(DEMO_KEY)),
            client.get(f"{run_path}/nodes", headers=auth(DEMO_KEY)),
            client.get(f"{run_path}/events", headers=auth(DEMO_KEY)),
            client.get(f"{run_path}/edges", headers=auth(DEMO_KEY)),
            client.post(f"{run_path}/cancel", headers=auth(DEMO_KEY)),
        )
        ready = await client.get("/readyz")
        partition.restore()

        assert_unavailable(submitted, "database-unavailable")
        for read in reads:
            assert_unavailable(read, "database-unavailable")
        assert_unavailable(ready, "not-ready")
        assert ready.json()["checks"]["database"]["ok"] is False
        assert await count_runs(scratch_dsn, key) == 0  # nothing was accepted: the key is still fresh

        accepted = await client.post(
            "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": key}
        )
        assert accepted.status_code == 201, accepted.text
    assert await count_runs(scratch_dsn, key) == 1


async def test_a_child_runs_creation_rides_out_an_outage_that_a_submission_gives_up_on(
    partition: PartitionProxy,
) -> None:
    # A submission has a client waiting: it gives up within its request's window. A child run's creation is a
    # step of its parent run, which rides out an outage as its other records do (a parent failed
    # INTERNAL_ERROR when PostgreSQL took over a second to answer, under a loaded CI machine).
    from actors.store.database import create_pool
    from actors.store.resilience import DatabaseUnavailable
    from actors.store.runs import Creation, RunStore
    from dag.events import ParentLink
    from tests.run_fakes import run_created

    pool = await create_pool(partition.dsn, max_size=2)
    try:
        store = RunStore(pool)
        parent = run_created(run_id=str(uuid.uuid4()))
        assert (await store.create_run(parent, idempotency_key=None, request_hash="parent"))[
            0
        ] is Creation.CREATED
        link = ParentLink(run_id=parent.run_id, node_id="research", depth=1)
        child = run_created(run_id=str(uuid.uuid4())).model_copy(update={"parent": link})

        partition.cut()
        asyncio.get_running_loop().call_later(3.0, partition.restore)
        with pytest.raises(DatabaseUnavailable):
            await store.create_run(
                run_created(run_id=str(uuid.uuid4())), idempotency_key=None, request_hash="s"
            )
        created = await store.create_run(child, idempotency_key=None, request_hash="child")
    finally:
        partition.restore()
        await pool.close()

    assert created == (Creation.CREATED, child.run_id)

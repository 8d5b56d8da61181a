"""Bring up everything a run needs on one machine: database, migrations, MCP tool server, Ray, supervisor."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from actors.background_server import BackgroundServer
from actors.settings import Settings
from actors.store.database import create_pool, embedded_postgres
from actors.store.migrate import migrate
from actors.store.seed import SeedData, load_seed
from actors.supervisor import NAMESPACE, SupervisorConfig, get_or_create_supervisor
from mcp_server.server import MCP_PATH, ToolServer, ToolServerConfig
from mcp_server.tokens import TaskTokens, load_token_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    dsn: str
    mcp_url: str
    token_key: bytes
    supervisor: Any
    tool_server: ToolServer | None


async def prepare_database(dsn: str, seed: SeedData | None = None) -> list[int]:
    """Apply pending migrations (and load ``seed``); return the migration versions applied now."""
    pool = await create_pool(dsn, max_size=1)
    try:
        async with pool.acquire() as connection:
            applied = await migrate(connection)
            if seed is not None:
                await load_seed(connection, seed)
        return applied
    finally:
        await pool.close()


@contextmanager
def database(settings: Settings) -> Iterator[str]:
    """The DSN of ``RAYDAG_DATABASE_URL``, or of the embedded server (stopped again on exit)."""
    if settings.database_url is not None:
        yield settings.database_url.get_secret_value()
    else:
        with embedded_postgres(settings.home_dir) as dsn:
            yield dsn


def init_ray(*, dashboard: bool = False) -> None:
    """Join the cluster named by ``RAY_ADDRESS`` (as ``ray job submit`` sets it), else start a local Ray."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address=os.environ.get("RAY_ADDRESS") or "local",
        namespace=NAMESPACE,
        include_dashboard=dashboard,
        logging_level=logging.WARNING,
        log_to_driver=True,
    )


@contextmanager
def local_runtime(
    settings: Settings, *, seed: SeedData | None = None, dashboard: bool = False
) -> Iterator[Runtime]:
    """Everything a run needs, torn down in reverse on exit.

    Without ``RAYDAG_MCP_URL`` the tool server runs in this process on a free loopback port.
    """
    with ExitStack() as stack:
        dsn = stack.enter_context(database(settings))
        asyncio.run(prepare_database(dsn, seed))
        token_key = load_token_key(
            settings.token_key.get_secret_value() if settings.token_key else None, settings.home_dir
        )
        tool_server: ToolServer | None = None
        if settings.mcp_url:
            mcp_url = settings.mcp_url
        else:
            http = BackgroundServer(host="127.0.0.1")
            mcp_url = http.url + MCP_PATH
            tool_server = ToolServer(
                ToolServerConfig(
                    dsn=dsn,
                    tokens=TaskTokens(key=token_key, audience=mcp_url),
                    latency_ms=settings.tool_latency_ms,
                    pool_size=settings.db_pool_size,
                )
            )
            http.start(tool_server.asgi_app())
            stack.callback(http.stop)
        init_ray(dashboard=dashboard)
        config = SupervisorConfig(
            dsn=dsn,
            mcp_url=mcp_url,
            token_key=token_key,
            limits=settings.budgets,
            pool_size=settings.db_pool_size,
            tenant_tools=settings.tenant_tool_grants(),
            lease_s=settings.lease_s,
            planners=settings.planner_paths(),
            openai=settings.openai_settings(),
            outbox_webhook_url=settings.outbox_webhook_url,
            tool_executor=settings.tool_executor,
            tool_callers=settings.tool_callers,
        )
        supervisor = get_or_create_supervisor(
            config, name=f"{settings.supervisor_name}-cli-{os.getpid()}", detached=False
        )
        stack.callback(_kill, supervisor)
        yield Runtime(settings, dsn, mcp_url, token_key, supervisor, tool_server)


def _kill(actor: Any) -> None:
    import ray

    ray.kill(actor, no_restart=True)

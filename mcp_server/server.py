"""The caseops MCP server: ``MCPServer`` tools and resources built from the contracts, over Streamable HTTP.

One stateless endpoint answers both protocol eras: 2026-07-28 (``server/discover``, no session) and
2025-11-25 (the initialize handshake). Tenant, case and scopes come only from the verified task token; the
HTTP guard (``mcp_server.guard``) checks the request before the SDK sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from mcp.server.caching import CacheableMethod, CacheHint
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    InputRequiredResult,
    Resource,
    ServerCapabilities,
    ServerTasksCapability,
    ToolExecution,
)
from mcp_types import Tool as MCPTool
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.routing import Router

from dag.tokens import TaskTokens
from mcp_server.auth import ASGIApp, current_claims
from mcp_server.config import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, ToolServerConfig
from mcp_server.contracts import EXPORT_EVIDENCE
from mcp_server.guard import McpGuard
from mcp_server.limits import Admission
from mcp_server.replay import ReplayCache
from mcp_server.resources import case_resources, register_evidence
from mcp_server.stateless_call import StatelessCalls
from mcp_server.task_requests import EXTENSION, TASKS_CAPABILITY, TaskRequests
from mcp_server.tools import Backend, ToolBinding, caseops_bindings, guarded_tool

log = logging.getLogger(__name__)

TASK_TOOLS = frozenset({EXPORT_EVIDENCE.name})
"""The tools that run as MCP tasks (2025-11-25): listed with ``execution.taskSupport: optional``."""
MCP_PATH = "/mcp"
APPLICATION_NAME = "raydag-mcp"
"""How the tool server's database connections appear in ``pg_stat_activity``."""


CACHE_HINTS: dict[CacheableMethod, CacheHint] = {
    # The same for every caller, and changed only by a deployment.
    "server/discover": CacheHint(ttl_ms=300_000, scope="public"),
    "tools/list": CacheHint(ttl_ms=300_000, scope="public"),
    "resources/templates/list": CacheHint(ttl_ms=300_000, scope="public"),
    # Depends on the token's case, and a case may get a new version.
    "resources/list": CacheHint(ttl_ms=30_000, scope="private"),
    # Version-pinned URIs never change, but what a token may read is the token's business.
    "resources/read": CacheHint(ttl_ms=300_000, scope="private"),
}


async def _rollback_only(connection: asyncpg.Connection) -> None:
    """The pool's ``reset``: asyncpg rolls back a transaction left open, and this skips its reset query (a
    round trip per release, which every tool call waited for). The pool leaves no session state to reset."""


class _CaseopsServer(MCPServer[Any]):
    """``MCPServer`` with the caseops tools and evidence resources, and two corrections of the SDK: an unknown
    tool is a JSON-RPC ``-32602`` (as the spec says) rather than an ``isError`` result, and
    ``resources/list`` lists what the caller's token may read."""

    def __init__(self, backend: Backend, bindings: Sequence[ToolBinding]) -> None:
        tools = [guarded_tool(contract, handler, backend) for contract, handler in bindings]
        super().__init__(
            "raydag-caseops",
            version="1.0.0",
            log_level="WARNING",
            tools=tools,
            cache_hints=CACHE_HINTS,
            subscriptions=False,  # nothing here changes at run time; no long-lived listen streams
        )
        self._backend = backend
        self.tools = tuple(tools)
        self._tool_names = frozenset(tool.name for tool in tools)
        register_evidence(self, backend)
        self._advertise_tasks()

    def _advertise_tasks(self) -> None:
        """Add ``tasks`` to the handshake era's capabilities: the SDK derives them from its own handlers, and
        the Tasks methods are answered past it (``mcp_server.task_requests``). The 2026-07-28 era has no
        Tasks in its core: there, ``server/discover`` advertises the ``io.modelcontextprotocol/tasks``
        extension instead."""
        lowlevel = self._lowlevel_server
        derived = lowlevel.get_capabilities

        def with_tasks(*args: Any, **kwargs: Any) -> ServerCapabilities:
            capabilities = derived(*args, **kwargs)
            if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
                extensions = {**(capabilities.extensions or {}), EXTENSION: {}}
                return capabilities.model_copy(update={"extensions": extensions})
            return capabilities.model_copy(
                update={"tasks": ServerTasksCapability.model_validate(TASKS_CAPABILITY)}
            )

        lowlevel.get_capabilities = with_tasks  # type: ignore[method-assign]

    async def list_tools(self) -> list[MCPTool]:
        """The tools, those that run as tasks saying so (``optional``: a client without Tasks, or one of the
        2026-07-28 era, whose listing drops ``execution``, still calls them, and waits for the answer)."""
        return [
            tool.model_copy(update={"execution": ToolExecution(task_support="optional")})
            if tool.name in TASK_TOOLS
            else tool
            for tool in await super().list_tools()
        ]

    @property
    def server_info_stamp(self) -> dict[str, Any]:
        """The ``serverInfo`` the SDK stamps on this server's 2026-07-28 answers."""
        return self._lowlevel_server.server_info_stamp

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if name not in self._tool_names:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {name}")
        return await super().call_tool(name, arguments, context)

    async def list_resources(self) -> list[Resource]:
        claims = current_claims.get()
        return [] if claims is None else await case_resources(self._backend, claims)


class ToolServer:
    """The MCP endpoint as an ASGI app plus the lifespan that must run around it.

    Host it standalone (``asgi_app()``), or mount ``asgi`` in another app and enter ``lifespan()`` from
    that app's own lifespan (a mounted app's lifespan is not run by Starlette).
    """

    def __init__(self, config: ToolServerConfig, extra_tools: Sequence[ToolBinding] = ()) -> None:
        """``extra_tools`` are served beside caseops, behind the same token checks (benchmarks use this).

        Its spans go through the OpenTelemetry API; the hosting process configures where they are exported.
        """
        self._backend = Backend(config)
        bindings = [*caseops_bindings(self._backend), *extra_tools]
        self.mcp = _CaseopsServer(self._backend, bindings)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(config.allowed_hosts),
            allowed_origins=list(config.allowed_origins),
        )
        inner = self.mcp.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            max_request_body_size=config.max_body_bytes,
        )
        self._replay = ReplayCache(self._backend.live_pool)
        self._tasks = TaskRequests(
            self._backend, {tool.name: tool for tool in self.mcp.tools if tool.name in TASK_TOOLS}
        )
        self._direct = (
            StatelessCalls(self.mcp, self.mcp.tools, self.mcp.server_info_stamp, MCP_PATH)
            if config.direct_calls
            else None
        )
        self.asgi: ASGIApp = McpGuard(
            inner,
            tokens=None if config.insecure_disable_auth_for_tests else config.tokens,
            security=security,
            max_body_bytes=config.max_body_bytes,
            scope_of_tool={contract.name: contract.scope for contract, _ in bindings},
            admission=Admission(config.tenant_limits),
            replay=self._replay,
            direct=self._direct,
            tasks=self._tasks,
        )

    @property
    def calls(self) -> dict[str, int]:
        """Tool calls this server has received, by tool, whether or not they were allowed to execute."""
        return dict(self._backend.calls)

    def simulate(
        self,
        *,
        latency_ms: int = 0,
        faults: dict[str, int] | None = None,
        stall_after_commit: dict[str, int] | None = None,
    ) -> None:
        """Change the simulated upstream latency and injected faults (benchmarks and tests; off by default).

        Fault counts apply to the calls received from now on.
        """
        backend = self._backend
        backend.config = dataclasses.replace(
            backend.config,
            latency_ms=latency_ms,
            faults={tool: backend.calls[tool] + count for tool, count in (faults or {}).items()},
            stall_after_commit={
                tool: backend.calls[tool] + count for tool, count in (stall_after_commit or {}).items()
            },
        )

    @property
    def direct_answers(self) -> int:
        """Requests answered past the SDK (``ToolServerConfig.direct_calls``)."""
        return self._direct.answered if self._direct is not None else 0

    @property
    def executions(self) -> dict[tuple[str, str, str], int]:
        """Calls that passed every check and queried data, by (tenant, case, tool): kept on the server's side."""
        return dict(self._backend.executions)

    @property
    def answered(self) -> Counter[str]:
        """Calls a tool answered with a result (not a refusal), by task without its attempt (``run/node``)."""
        return Counter(self._backend.answered)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        config = self._backend.config
        # The pool's only writes are replay-cache rows. Committing them without waiting for the WAL flush
        # saves ~2 ms per tool call; the row is visible to every replica at once either way, and a crash of
        # PostgreSQL itself could lose only the last fraction of a second of them.
        self._backend.pool = await asyncpg.create_pool(
            config.dsn,
            min_size=0,  # an idle server holds no connection; one idle a minute is closed
            max_size=config.pool_size,
            max_inactive_connection_lifetime=60.0,
            server_settings={"synchronous_commit": "off", "application_name": APPLICATION_NAME},
            reset=_rollback_only,
        )
        pruning = asyncio.create_task(self._prune_forever(config.replay_prune_interval_s))
        try:
            async with self.mcp.session_manager.run():
                yield
        finally:
            await self._tasks.aclose()
            pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pruning
            await self._backend.pool.close()
            self._backend.pool = None

    async def _prune_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self._replay.prune()
            except (asyncpg.PostgresError, OSError) as exc:
                log.warning("pruning the replay cache failed (%s); trying again later", type(exc).__name__)
            await asyncio.sleep(interval_s)

    def asgi_app(self) -> Router:
        """The server as an app of its own: ``lifespan()`` on the ASGI lifespan, every request to ``asgi``.

        A bare router, not a Starlette app: Starlette wraps each request in two middlewares and a mount, about a
        tenth of the server's CPU per tool call, for nothing ``asgi`` needs (it answers every request itself,
        and an exception it lets escape still becomes a 500 from the HTTP server)."""

        @asynccontextmanager
        async def lifespan(_: object) -> AsyncIterator[None]:
            async with self.lifespan():
                yield

        return Router(lifespan=lifespan, default=self.asgi)


def hosted(
    *,
    dsn: str,
    tokens: TaskTokens,
    latency_ms: int = 0,
    pool_size: int = 4,
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS,
    allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS,
) -> ToolServer:
    """The caseops server as raydag hosts it (``hosting.server`` in ``caseops.yaml``)."""
    return ToolServer(
        ToolServerConfig(
            dsn=dsn,
            tokens=tokens,
            latency_ms=latency_ms,
            pool_size=pool_size,
            allowed_hosts=allowed_hosts,
            allowed_origins=allowed_origins,
        )
    )

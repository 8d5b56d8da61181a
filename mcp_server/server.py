"""The caseops MCP server: ``MCPServer`` tools built from the contracts, served over Streamable HTTP.

One stateless endpoint answers both protocol eras: 2026-07-28 (``server/discover``, no session) and
2025-11-25 (the initialize handshake). Tenant, case and scopes come only from the verified task token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel
from starlette.applications import Starlette

from dag.contracts import Risk, ToolContract
from dag.fingerprint import canonical_json
from mcp_server.auth import ASGIApp, TaskTokenAuth, require_claims
from mcp_server.caseops import CaseopsError, CaseopsRepository, case_not_found
from mcp_server.contracts import (
    GET_CASE_SNAPSHOT,
    GET_POLICY_REQUIREMENTS,
    LIST_UNCLASSIFIED_DOCUMENTS,
    RESOLVE_DOCUMENT_ALIAS,
)
from mcp_server.tokens import TaskClaims, TaskTokens

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"


@dataclass
class ToolServerConfig:
    dsn: str
    tokens: TaskTokens
    latency_ms: int = 0
    """Simulated upstream latency per call (benchmarks, tests); 0 in production."""
    pool_size: int = 4
    faults: dict[str, int] = field(default_factory=dict)
    """Fault injection for tests: the first N calls of each named tool answer UPSTREAM_UNAVAILABLE."""


@dataclass
class _Backend:
    """What tools need at call time; the pool exists only while the server's lifespan runs."""

    config: ToolServerConfig
    pool: asyncpg.Pool | None = None
    calls: Counter[str] = field(default_factory=Counter)
    executions: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    def repository(self) -> CaseopsRepository:
        if self.pool is None:
            raise RuntimeError("the tool server is not started")
        return CaseopsRepository(self.pool)


def _error_result(error: CaseopsError) -> CallToolResult:
    payload = {"error": {"code": error.code, "message": error.message}}
    return CallToolResult(content=[TextContent(type="text", text=canonical_json(payload))], is_error=True)


def _annotations(contract: ToolContract) -> ToolAnnotations:
    """Hints for clients, derived from the contract; raydag never trusts annotations for authorization."""
    read_only = contract.risk is Risk.READ_ONLY
    return ToolAnnotations(
        title=contract.description,
        read_only_hint=read_only,
        destructive_hint=contract.risk is Risk.IRREVERSIBLE_WRITE,
        idempotent_hint=read_only,
        open_world_hint=False,
    )


ToolHandler = Callable[[TaskClaims, Any], Awaitable[BaseModel]]
"""Serves one call: the verified claims and the validated input model in, the output model out."""

ToolBinding = tuple[ToolContract, ToolHandler]


def caseops_bindings(backend: _Backend) -> list[ToolBinding]:
    """The four caseops tools; every query is scoped to the token's tenant."""
    repository = backend.repository
    return [
        (GET_CASE_SNAPSHOT, lambda claims, args: repository().case_snapshot(claims.tenant_id, args.case_id)),
        (
            GET_POLICY_REQUIREMENTS,
            lambda claims, args: repository().policy_requirements(claims.tenant_id, args.case_id),
        ),
        (
            LIST_UNCLASSIFIED_DOCUMENTS,
            lambda claims, args: repository().unclassified_documents(claims.tenant_id, args.case_id),
        ),
        (
            RESOLVE_DOCUMENT_ALIAS,
            lambda claims, args: repository().resolve_document_alias(
                claims.tenant_id, args.case_id, args.document_id
            ),
        ),
    ]


def _guarded_tool(contract: ToolContract, handler: ToolHandler, backend: _Backend) -> Tool:
    """A tool whose inputs, input validation and output schema all come from the contract, and whose every
    call passes the token checks first.

    The contract's input model forbids unknown fields, so the published ``inputSchema`` carries
    ``additionalProperties: false`` and the server rejects what the schema does not allow.
    """
    name = contract.name

    async def call(**arguments: Any) -> BaseModel | CallToolResult:
        claims = require_claims()
        backend.calls[name] += 1
        if backend.config.latency_ms:
            await asyncio.sleep(backend.config.latency_ms / 1000)
        try:
            if name != claims.tool:
                raise CaseopsError(
                    "TOKEN_NOT_FOR_TOOL", f"the task token was minted for another tool than {name}"
                )
            case_id = arguments.get("case_id")
            if "case_id" in contract.run_bound and case_id != claims.case_id:
                raise case_not_found(str(case_id))  # a token is bound to one case; others do not exist for it
            if contract.scope not in claims.scopes:
                raise CaseopsError(
                    "INSUFFICIENT_SCOPE", f"{name} needs scope {contract.scope!r}, which the token lacks"
                )
            if backend.calls[name] <= backend.config.faults.get(name, 0):
                raise CaseopsError("UPSTREAM_UNAVAILABLE", "the upstream system is unavailable; retry later")
            backend.executions[(claims.tenant_id, str(case_id), name)] += 1
            return await handler(claims, contract.input_model.model_validate(arguments))
        except CaseopsError as error:
            return _error_result(error)

    arg_model: type[ArgModelBase] = type(
        f"{contract.input_model.__name__}Arguments", (contract.input_model, ArgModelBase), {}
    )
    return Tool(
        fn=call,
        name=name,
        description=contract.description,
        parameters=arg_model.model_json_schema(),
        fn_metadata=FuncMetadata(arg_model=arg_model, output_model=contract.output_model),
        is_async=True,
        annotations=_annotations(contract),
    )


def build_mcp_server(backend: _Backend, extra: Sequence[ToolBinding] = ()) -> MCPServer:
    tools = [
        _guarded_tool(contract, handler, backend)
        for contract, handler in (*caseops_bindings(backend), *extra)
    ]
    return MCPServer("raydag-caseops", version="1.0.0", log_level="WARNING", tools=tools)


class ToolServer:
    """The MCP endpoint as an ASGI app plus the lifespan that must run around it.

    Host it standalone (``asgi_app()``), or mount ``asgi`` in another app and enter ``lifespan()`` from
    that app's own lifespan (a mounted app's lifespan is not run by Starlette).
    """

    def __init__(self, config: ToolServerConfig, extra_tools: Sequence[ToolBinding] = ()) -> None:
        """``extra_tools`` are served beside caseops, behind the same token checks (benchmarks use this)."""
        self._backend = _Backend(config)
        self.mcp = build_mcp_server(self._backend, extra_tools)
        inner = self.mcp.streamable_http_app(
            streamable_http_path=MCP_PATH, stateless_http=True, json_response=True, host="127.0.0.1"
        )
        self.asgi: ASGIApp = TaskTokenAuth(inner, config.tokens)

    @property
    def calls(self) -> dict[str, int]:
        """Tool calls this server has received, by tool, whether or not they were allowed to execute."""
        return dict(self._backend.calls)

    def simulate(self, *, latency_ms: int = 0, faults: dict[str, int] | None = None) -> None:
        """Change the simulated upstream latency and injected faults (benchmarks and tests; off by default).

        Fault counts apply to the calls received from now on.
        """
        backend = self._backend
        backend.config = dataclasses.replace(
            backend.config,
            latency_ms=latency_ms,
            faults={tool: backend.calls[tool] + count for tool, count in (faults or {}).items()},
        )

    @property
    def executions(self) -> dict[tuple[str, str, str], int]:
        """Calls that passed every check and queried data, by (tenant, case, tool): kept on the server's side."""
        return dict(self._backend.executions)

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        config = self._backend.config
        self._backend.pool = await asyncpg.create_pool(config.dsn, min_size=1, max_size=config.pool_size)
        try:
            async with self.mcp.session_manager.run():
                yield
        finally:
            await self._backend.pool.close()
            self._backend.pool = None

    def asgi_app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with self.lifespan():
                yield

        app = Starlette(lifespan=lifespan)
        app.mount("/", self.asgi)
        return app

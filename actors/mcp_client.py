"""The runtime's side of a tool call: one MCP request with a task token, classified into an outcome.

``McpConnections`` keeps what may be kept between calls: the HTTP connections (keep-alive) and, in
2026-07-28 mode, one SDK client per server URL, which needs no handshake and lists the tools once (to check
outputs against their schemas) instead of before every call. Every call still sends its own token, minted
for it alone. In 2025-11-25 mode each call opens its own session (initialize handshake): a handshake-era
server may tie a session to the token that opened it, so sessions are never shared between tokens.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Generator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, CallToolResult
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import ValidationError

from actors.tracing import context_of, tracer
from dag.contracts import ToolCatalogue
from dag.events import ErrorKind, NodeError

_SSL_CONTEXT = ssl.create_default_context()
"""Loading CA certificates costs ~35 ms; a worker builds the context once, not per call."""

MODERN_PROTOCOL = "2026-07-28"
"""Stateless: a call is one HTTP request, no handshake. ``"legacy"`` selects the 2025-11-25 handshake."""


@dataclass(frozen=True)
class ToolCall:
    """Everything a worker needs for one call. The token is minted for this call alone."""

    run_id: str
    node_id: str
    attempt: int
    tool: str
    args: dict[str, Any]
    mcp_url: str
    token: str
    timeout_s: float
    protocol: str = MODERN_PROTOCOL
    trace: dict[str, str] = field(default_factory=dict)
    """W3C trace context of the node's span: the call's span, and the MCP request, join the run's trace."""


@dataclass(frozen=True)
class ToolOutcome:
    output: Any
    error: NodeError | None
    started_at: datetime
    finished_at: datetime

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _CallContext:
    token: str
    refusals: list[tuple[int, str]] = field(default_factory=list)
    """(HTTP status, ``WWW-Authenticate``) of each request the server refused during this call."""


_current_call: ContextVar[_CallContext | None] = ContextVar("raydag_mcp_call", default=None)


class _PerCallBearer(httpx2.Auth):
    """Sends the current call's token on each request and notes refusals (the SDK reports a refused request
    only as "Server returned an error response").

    The SDK sends a request's HTTP POST in a copy of the caller's context (``ContextSendStream``), so
    concurrent calls over one shared client each send their own token. Outside a call: no token at all.
    """

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        call = _current_call.get()
        request.headers.pop("Authorization", None)
        if call is not None:
            request.headers["Authorization"] = f"Bearer {call.token}"
            propagate.inject(request.headers)  # the call's span: the server's span joins the run's trace
        response = yield request
        # 400 and 404 carry a JSON-RPC error, which the SDK raises as it is; other refusals carry none.
        if call is not None and response.status_code >= 400 and response.status_code not in (400, 404):
            call.refusals.append((response.status_code, response.headers.get("www-authenticate", "")))


class _ModernSession:
    """One 2026-07-28 SDK client for one URL, entered and exited by a task of its own: anyio requires the
    task that enters a task group to leave it, and calls come from many tasks."""

    def __init__(self, url: str, http: httpx2.AsyncClient) -> None:
        self._url = url
        self._http = http
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.client: Client | None = None
        self.closed = False

    async def start(self) -> Client:
        self._task = asyncio.create_task(self._run(), name=f"mcp-session:{self._url}")
        await self._ready.wait()
        if self.client is None:
            await self._task  # re-raises why it could not start
            raise RuntimeError("the MCP session ended before it started")
        return self.client

    async def _run(self) -> None:
        try:
            transport = streamable_http_client(self._url, http_client=self._http, terminate_on_close=False)
            async with Client(transport, mode=MODERN_PROTOCOL, cache=None) as client:
                self.client = client
                self._ready.set()
                await self._closing.wait()
        finally:
            self.closed = True
            self.client = None
            self._ready.set()

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


class McpConnections:
    """Connections to MCP servers for many calls, each with its own token. Use in one event loop,
    ``async with``; ``call_tool`` without one opens and closes a set for a single call."""

    def __init__(self) -> None:
        self._http = httpx2.AsyncClient(
            auth=_PerCallBearer(), timeout=httpx2.Timeout(30.0), verify=_SSL_CONTEXT
        )
        self._sessions: dict[str, _ModernSession] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def __aenter__(self) -> McpConnections:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()
        await self._http.aclose()

    async def call(self, call: ToolCall, catalogue: ToolCatalogue) -> ToolOutcome:
        """Call one tool and classify what happened; never raises for a failure of the call itself."""
        started = datetime.now(UTC)
        context = _CallContext(call.token)
        reset = _current_call.set(context)
        span = tracer().start_span(
            f"tool call {call.tool}",
            context=context_of(call.trace),
            kind=SpanKind.CLIENT,
            attributes={
                "raydag.run_id": call.run_id,
                "raydag.node_id": call.node_id,
                "raydag.tool": call.tool,
                "raydag.attempt": call.attempt,
            },
        )
        attached = otel_context.attach(trace.set_span_in_context(span))
        try:
            with anyio.fail_after(call.timeout_s):
                result = await self._send(call)
            output, error = _classify_result(call, result, catalogue)
        except TimeoutError:
            message = f"no answer within {call.timeout_s:g}s"
            output, error = None, NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message=message)
        except Exception as exc:  # a failed call must become a recorded outcome, not a lost task
            if context.refusals:
                output, error = None, _classify_status(*context.refusals[0])
            else:
                output, error = None, _classify_exception(_leaf(exc))
        finally:
            _current_call.reset(reset)
            otel_context.detach(attached)
            if error is not None:
                span.set_attribute("raydag.error_kind", error.kind.value)
                span.set_attribute("raydag.error_code", error.code)
                span.set_status(Status(StatusCode.ERROR, error.code))
            span.end()
        return ToolOutcome(output=output, error=error, started_at=started, finished_at=datetime.now(UTC))

    async def _send(self, call: ToolCall) -> CallToolResult:
        if call.protocol != MODERN_PROTOCOL:
            transport = streamable_http_client(call.mcp_url, http_client=self._http)
            async with Client(transport, mode=call.protocol, cache=None) as client:
                return await client.call_tool(call.tool, call.args)
        session, client = await self._modern(call.mcp_url)
        try:
            return await client.call_tool(call.tool, call.args)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:  # the session's transport is gone: the next call starts afresh
                await self._discard(call.mcp_url, session)
            raise
        except Exception:
            await self._discard(call.mcp_url, session)
            raise

    async def _modern(self, url: str) -> tuple[_ModernSession, Client]:
        session = self._sessions.get(url)
        if session is not None and session.client is not None and not session.closed:
            return session, session.client
        async with self._opening.setdefault(url, asyncio.Lock()):
            session = self._sessions.get(url)
            if session is not None and session.client is not None and not session.closed:
                return session, session.client
            if session is not None:  # it ended (the server went away): collect it, then start afresh
                await session.close()
            session = self._sessions[url] = _ModernSession(url, self._http)
            return session, await session.start()

    async def _discard(self, url: str, session: _ModernSession) -> None:
        if self._sessions.get(url) is session:
            del self._sessions[url]
        await session.close()


async def call_tool(
    call: ToolCall, catalogue: ToolCatalogue, connections: McpConnections | None = None
) -> ToolOutcome:
    """Call one tool over ``connections``, or over connections opened and closed for this call alone."""
    if connections is not None:
        return await connections.call(call, catalogue)
    async with McpConnections() as fresh:
        return await fresh.call(call, catalogue)


def _classify_result(
    call: ToolCall, result: CallToolResult, catalogue: ToolCatalogue
) -> tuple[Any, NodeError | None]:
    if result.is_error:
        return None, _classify_tool_error(result)
    contract = catalogue[call.tool]
    try:
        contract.output_model.model_validate(result.structured_content)
    except ValidationError as exc:
        return None, NodeError(
            kind=ErrorKind.PROTOCOL,
            code="OUTPUT_SCHEMA_MISMATCH",
            message=f"{call.tool} answered outside its output schema ({exc.error_count()} errors)",
        )
    return result.structured_content, None


_KIND_OF_CODE = {
    "INSUFFICIENT_SCOPE": ErrorKind.AUTHORIZATION,
    "TOKEN_NOT_FOR_TOOL": ErrorKind.AUTHORIZATION,
    "UNAUTHENTICATED": ErrorKind.AUTHORIZATION,
    "INVALID_ARGUMENTS": ErrorKind.CONTRACT,
    "UPSTREAM_UNAVAILABLE": ErrorKind.TRANSIENT,
}
"""Tool error codes that are not business answers; every other refusal by a tool is a business answer."""


def _classify_tool_error(result: CallToolResult) -> NodeError:
    """An ``isError`` result: the tool ran and refused. The code is read from ``structuredContent`` first,
    then from the text (servers that put the JSON only there), then guessed from SDK wording."""
    text = " ".join(getattr(block, "text", "") for block in result.content)
    error = _error_object(result.structured_content)
    if error is None:
        try:
            error = _error_object(json.loads(text))
        except ValueError:
            error = None
    if error is not None:
        code, message = error
        return NodeError(kind=_KIND_OF_CODE.get(code, ErrorKind.BUSINESS), code=code, message=message)
    if "validation error" in text or "Unknown tool" in text:
        return NodeError(kind=ErrorKind.CONTRACT, code="TOOL_REJECTED_ARGUMENTS", message=text[:500])
    return NodeError(kind=ErrorKind.BUSINESS, code="TOOL_ERROR", message=text[:500])


def _error_object(payload: Any) -> tuple[str, str] | None:
    """``(code, message)`` of ``{"error": {"code": ..., "message": ...}}``, or ``None`` for anything else."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return error["code"], str(error.get("message", ""))[:500]
    return None


def _classify_exception(exc: BaseException) -> NodeError:
    if isinstance(exc, MCPError):
        if exc.code == CONNECTION_CLOSED:
            return NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message=exc.message[:500])
        kind = ErrorKind.CONTRACT if exc.code == INVALID_PARAMS else ErrorKind.PROTOCOL
        return NodeError(kind=kind, code=f"JSONRPC_{exc.code}", message=exc.message[:500])
    if isinstance(exc, httpx2.HTTPStatusError):
        return _classify_status(exc.response.status_code, exc.response.headers.get("www-authenticate", ""))
    if isinstance(exc, httpx2.TransportError | ConnectionError | TimeoutError):
        return NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message=type(exc).__name__)
    # Only the exception's type is recorded: its text may echo arguments or tokens.
    return NodeError(kind=ErrorKind.UNKNOWN_EFFECT, code="UNEXPECTED_ERROR", message=type(exc).__name__)


def _classify_status(status: int, challenge: str = "") -> NodeError:
    if status == 403 and 'error="insufficient_scope"' in challenge:
        return NodeError(
            kind=ErrorKind.AUTHORIZATION,
            code="INSUFFICIENT_SCOPE",
            message="the task token lacks the scope the tool needs",
        )
    if status in (401, 403):
        return NodeError(
            kind=ErrorKind.AUTHORIZATION, code=f"HTTP_{status}", message="the tool server refused the token"
        )
    kind = ErrorKind.TRANSIENT if status in (429, 502, 503, 504) else ErrorKind.PROTOCOL
    return NodeError(kind=kind, code=f"HTTP_{status}", message=f"the tool server answered HTTP {status}")


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc

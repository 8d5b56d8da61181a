"""The runtime's side of a tool call: one MCP request, with the right credentials, classified into an outcome.

``McpConnections`` keeps what may be kept between calls: the HTTP connections (keep-alive) and, in
2026-07-28 mode, one SDK client per server URL, which needs no handshake and lists the tools once (to check
outputs against their schemas) instead of before every call. Every call with a task token still sends its
own, minted for it alone. In 2025-11-25 mode such a call opens its own session (initialize handshake): a
handshake-era server may tie a session to the token that opened it, so sessions are never shared between
tokens.

Calls to a toolset server (``ToolCall.server``) go the way its declaration says: Streamable HTTP with
raydag's task token, a static bearer secret read here, an OAuth client-credentials grant
(``actors.toolsets.credentials``) or no credentials (then one session serves every call, in either era), or
stdio to a child process this object owns
(``actors.mcp_client.stdio``). Each server admits ``max_concurrency`` calls at once from this process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import aiohttp
import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import x_mcp_header_map
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, CallToolResult
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from actors.mcp_client.session import OwnedSession, client_mode, is_modern, list_all_tools, make_client
from actors.mcp_client.stateless_post import (
    MODERN_PROTOCOL,
    MalformedAnswer,
    Refused,
    open_session,
    post_tool_call,
)
from actors.mcp_client.stdio import ServerUnavailable, StdioServerProcess, StdioStatus
from actors.toolsets.config import (
    BearerAuth,
    HttpServer,
    OAuthClientCredentials,
    RaydagTokenAuth,
    StdioServer,
)
from actors.toolsets.credentials import CredentialUnavailable, client_credentials_flow, read_secret
from actors.toolsets.listing import ServerListing
from actors.tracing import context_of, tracer
from dag.contracts import ToolCatalogue, ToolContract
from dag.events import ErrorKind, NodeError
from dag.storable import unfit_values

_SSL_CONTEXT = ssl.create_default_context()
"""Loading CA certificates costs ~35 ms; a worker builds the context once, not per call."""


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
    server: str | None = None
    """The toolset server to call (its declaration says how); ``None``: ``mcp_url`` with ``token``."""


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
    token: str | None
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
        token = self._token(call)
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        if call is not None:
            propagate.inject(request.headers)  # the call's span: the server's span joins the run's trace
        response = yield request
        # 400 and 404 carry a JSON-RPC error, which the SDK raises as it is; other refusals carry none.
        if call is not None and response.status_code >= 400 and response.status_code not in (400, 404):
            call.refusals.append((response.status_code, response.headers.get("www-authenticate", "")))

    def _token(self, call: _CallContext | None) -> str | None:
        return call.token if call is not None else None


class _ServerCredentials(_PerCallBearer):
    """One server's own credentials on every request to it: a bearer secret read now (so a rotated file or
    variable takes effect at once), or none at all. Never the task token of a call."""

    def __init__(self, server: str, auth: BearerAuth | None) -> None:
        self._server = server
        self._auth = auth

    def _token(self, call: _CallContext | None) -> str | None:
        return read_secret(self._server, self._auth) if self._auth is not None else None


class McpConnections:
    """Connections to MCP servers for many calls. Use in one event loop, ``async with``; ``call_tool``
    without one opens and closes a set for a single call. ``servers`` are the toolset servers calls may
    name; ``start`` starts the stdio ones now rather than on their first call."""

    def __init__(self, servers: Sequence[HttpServer | StdioServer] = (), *, sdk_calls: bool = False) -> None:
        """``sdk_calls``: make 2026-07-28 calls to ``mcp_url`` through the SDK client rather than as one POST
        each (``actors.mcp_client.stateless_post``); the benchmark compares the two."""
        self._sdk_calls = sdk_calls
        self._http = httpx2.AsyncClient(
            auth=_PerCallBearer(), timeout=httpx2.Timeout(30.0), verify=_SSL_CONTEXT
        )
        self._posts: aiohttp.ClientSession | None = None
        """One-POST calls' session (``stateless_post``), opened on the first such call, on its loop."""
        self._sessions: dict[str, OwnedSession] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._servers = {server.name: server for server in servers}
        self._limits = {server.name: asyncio.Semaphore(server.max_concurrency) for server in servers}
        self._own_http: dict[str, httpx2.AsyncClient] = {}
        self._stdio: dict[str, StdioServerProcess] = {}
        self._eras: dict[str, str] = {}
        """The era each auto-negotiating token-auth server answered in: its next sessions need no probe."""

    def start(self) -> None:
        """Start every stdio server now, in the background."""
        for server in self._servers.values():
            if isinstance(server, StdioServer):
                self._stdio_process(server).start()

    def stdio_status(self) -> dict[str, StdioStatus]:
        """Each stdio server started here: its pids, starts and the last lines of its stderr."""
        return {name: process.status() for name, process in self._stdio.items()}

    async def list_tools(self, server: str, token: str | None = None) -> ServerListing:
        """Every tool ``server`` lists now, over the connection its calls use (``token`` for a server that
        takes raydag's task tokens), each under the name raydag offers it as."""
        spec = self._servers[server]
        reset = _current_call.set(_CallContext(token))
        try:
            async with self._limits[server]:
                if isinstance(spec, StdioServer):
                    listing = await list_all_tools(await self._stdio_process(spec).client(), server)
                elif self._session_per_call(spec):
                    async with self._fresh_client(spec) as client:
                        listing = await list_all_tools(client, server)
                else:
                    _, client = await self._shared(spec.name, lambda: self._http_client(spec), listed=True)
                    listing = await list_all_tools(client, server)
            return listing.renamed(spec.renames)
        finally:
            _current_call.reset(reset)

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
        processes, self._stdio = list(self._stdio.values()), {}
        for process in processes:
            await process.stop()
        for http in (*self._own_http.values(), self._http):
            await http.aclose()
        posts, self._posts = self._posts, None
        if posts is not None:
            await posts.close()

    async def call(self, call: ToolCall, catalogue: ToolCatalogue) -> ToolOutcome:
        """Call one tool and classify what happened; never raises for a failure of the call itself."""
        started = datetime.now(UTC)
        context = _CallContext(call.token or None)
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
        error: NodeError | None = None  # a cancelled call leaves by BaseException, with no outcome to record
        try:
            with anyio.fail_after(call.timeout_s):
                result = await self._send(call, catalogue.get(call.tool))
            output, error = _classify_result(call, result, catalogue)
        except TimeoutError:
            message = f"no answer within {call.timeout_s:g}s"
            output, error = None, NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message=message)
        except (ServerUnavailable, CredentialUnavailable) as exc:
            output, error = None, _unavailable(exc)
        except Exception as exc:  # a failed call must become a recorded outcome, not a lost task
            if isinstance(_leaf(exc), CredentialUnavailable):
                output, error = None, _unavailable(_leaf(exc))
            elif context.refusals:
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

    async def _send(self, call: ToolCall, contract: ToolContract | None) -> CallToolResult:
        spec = self._servers.get(call.server) if call.server is not None else None
        if spec is not None:
            remote = spec.server_name(call.tool)
            if remote != call.tool:  # offered under a name of the operator's: the server knows its own
                call = dataclasses.replace(call, tool=remote)
            async with self._limits[spec.name]:
                if isinstance(spec, HttpServer) and self._posts_directly(spec, contract):
                    return await post_tool_call(
                        self._post_session(), spec.url, call.token, call.tool, call.args
                    )
                return await self._send_to(spec, call)
        if call.protocol != MODERN_PROTOCOL:
            transport = streamable_http_client(call.mcp_url, http_client=self._http)
            async with make_client(transport, call.protocol) as client:
                return await client.call_tool(call.tool, call.args)
        url = call.mcp_url
        if not self._sdk_calls:
            return await post_tool_call(self._post_session(), url, call.token, call.tool, call.args)
        return await self._call_shared(url, lambda: self._modern_client(url), call)

    async def _send_to(self, spec: HttpServer | StdioServer, call: ToolCall) -> CallToolResult:
        if isinstance(spec, StdioServer):
            process = self._stdio_process(spec)
            client = await process.client()
            try:
                return await client.call_tool(call.tool, call.args)
            except MCPError as exc:
                if exc.code == CONNECTION_CLOSED:
                    process.lost(client)
                raise
        if self._session_per_call(spec):
            async with self._fresh_client(spec) as client:
                return await client.call_tool(call.tool, call.args)
        return await self._call_shared(spec.name, lambda: self._http_client(spec), call, listed=True)

    async def _call_shared(
        self, key: str, connect: Callable[[], Client], call: ToolCall, *, listed: bool = False
    ) -> CallToolResult:
        session, client = await self._shared(key, connect, listed=listed)
        try:
            return await client.call_tool(call.tool, call.args)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:  # the session's transport is gone: the next call starts afresh
                await self._discard(key, session)
            raise
        except Exception:
            await self._discard(key, session)
            raise

    def _modern_client(self, url: str) -> Client:
        transport = streamable_http_client(url, http_client=self._http, terminate_on_close=False)
        return make_client(transport, MODERN_PROTOCOL)

    def _posts_directly(self, spec: HttpServer, contract: ToolContract | None) -> bool:
        """Whether a call to ``spec`` can be one POST (``stateless_post``): a server built for raydag's task
        tokens (as caseops is), pinned to the stateless era, and a tool that mirrors no argument into a
        header (which the SDK's listing would know). Anyone else's server keeps the SDK client, which also
        answers a request for input with its state echoed (SEP-2322), which the one-POST path does not."""
        if self._sdk_calls or contract is None or not isinstance(spec.auth, RaydagTokenAuth):
            return False
        return spec.protocol == MODERN_PROTOCOL and not x_mcp_header_map(contract.input_schema)

    def _session_per_call(self, spec: HttpServer) -> bool:
        """A task token is per call; a handshake-era session may be tied to the token that opened it."""
        if not isinstance(spec.auth, RaydagTokenAuth):
            return False
        return client_mode(self._eras.get(spec.name, spec.protocol)) != MODERN_PROTOCOL

    @asynccontextmanager
    async def _fresh_client(self, spec: HttpServer) -> AsyncIterator[Client]:
        mode = client_mode(self._eras.get(spec.name, spec.protocol))
        async with make_client(streamable_http_client(spec.url, http_client=self._http), mode) as client:
            self._eras[spec.name] = client.protocol_version if is_modern(client) else "2025-11-25"
            yield client

    def _http_client(self, spec: HttpServer) -> Client:
        """An SDK client shared by every call to ``spec``, over ``_http_for(spec)``."""
        transport = streamable_http_client(
            spec.url, http_client=self._http_for(spec), terminate_on_close=False
        )
        return make_client(transport, client_mode(self._eras.get(spec.name, spec.protocol)))

    def _post_session(self) -> aiohttp.ClientSession:
        if self._posts is None:
            self._posts = open_session(_SSL_CONTEXT)
        return self._posts

    def _http_for(self, spec: HttpServer) -> httpx2.AsyncClient:
        """The HTTP client for ``spec``: the task-token one, or one of its own carrying the server's own
        credentials."""
        http = self._http if isinstance(spec.auth, RaydagTokenAuth) else self._own_http.get(spec.name)
        if http is None:
            auth: httpx2.Auth
            if isinstance(spec.auth, OAuthClientCredentials):
                auth = client_credentials_flow(spec.name, spec.url, spec.auth)
            else:
                auth = _ServerCredentials(spec.name, spec.auth if isinstance(spec.auth, BearerAuth) else None)
            timeout = httpx2.Timeout(max(30.0, spec.timeouts.call_s))
            http = self._own_http[spec.name] = httpx2.AsyncClient(
                auth=auth, timeout=timeout, verify=_SSL_CONTEXT
            )
        return http

    def _stdio_process(self, spec: StdioServer) -> StdioServerProcess:
        process = self._stdio.get(spec.name)
        if process is None:
            process = self._stdio[spec.name] = StdioServerProcess(spec)
        return process

    async def _shared(
        self, key: str, connect: Callable[[], Client], *, listed: bool = False
    ) -> tuple[OwnedSession, Client]:
        """The shared session ``key``, opened if need be. ``listed``: a new 2026-07-28 session lists the tools
        before its first call, so the SDK knows which arguments to mirror in ``Mcp-Param-*`` headers."""
        session = self._sessions.get(key)
        if session is not None and session.usable and session.client is not None:
            return session, session.client
        async with self._opening.setdefault(key, asyncio.Lock()):
            session = self._sessions.get(key)
            if session is not None and session.usable and session.client is not None:
                return session, session.client
            if session is not None:  # it ended (the server went away): collect it, then start afresh
                await session.close()
            session = self._sessions[key] = OwnedSession(key, connect)
            client = await session.start()
            if listed and is_modern(client):
                await list_all_tools(client, key)
            return session, client

    async def _discard(self, key: str, session: OwnedSession) -> None:
        if self._sessions.get(key) is session:
            del self._sessions[key]
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
    output = result.structured_content
    if output is None and contract.output_schema is None:  # no structured output declared: the content is it
        output = {
            "content": [
                block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
            ]
        }
    # Before the schema: a value nested past every limit is not handed to a recursive validator.
    unfit = next(unfit_values(output), None)
    if unfit is not None:  # JSON it may be, but no run can record it: not an answer raydag can act on
        pointer, reason = unfit
        message = f"{call.tool} answered with a value no run can record ({reason}), at {pointer or '/'}"
        return None, NodeError(kind=ErrorKind.PROTOCOL, code="OUTPUT_UNSTORABLE", message=message[:500])
    problem = contract.output_problem(output)
    if problem is not None:
        return None, _output_mismatch(call.tool, problem)
    return contract.with_lines(output), None


def _output_mismatch(tool: str, problem: str) -> NodeError:
    return NodeError(
        kind=ErrorKind.PROTOCOL,
        code="OUTPUT_SCHEMA_MISMATCH",
        message=f"{tool} answered outside its output schema: {problem}"[:500],
    )


def _unavailable(exc: BaseException) -> NodeError:
    """The server could not be reached at all: not running (stdio), or its credentials are missing here."""
    if isinstance(exc, CredentialUnavailable):
        return NodeError(kind=ErrorKind.AUTHORIZATION, code="CREDENTIAL_UNAVAILABLE", message=str(exc)[:500])
    return NodeError(kind=ErrorKind.TRANSIENT, code="SERVER_UNAVAILABLE", message=str(exc)[:500])


_KIND_OF_CODE = {
    "INSUFFICIENT_SCOPE": ErrorKind.AUTHORIZATION,
    "TOKEN_NOT_FOR_TOOL": ErrorKind.AUTHORIZATION,
    "UNAUTHENTICATED": ErrorKind.AUTHORIZATION,
    "INVALID_ARGUMENTS": ErrorKind.CONTRACT,
    "UPSTREAM_UNAVAILABLE": ErrorKind.TRANSIENT,
}
"""Tool error codes that are not business answers; every other refusal by a tool is a business answer."""


def _classify_tool_error(result: CallToolResult) -> NodeError:
    """An ``isError`` result. The code is read from ``structuredContent`` first, then from the text (servers
    that put the JSON only there), then guessed from SDK wording; a refusal with no code is a protocol
    failure, never a business answer."""
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
    # Without a code nothing says the tool judged the data: a crashed handler reads the same. Not evidence.
    return NodeError(kind=ErrorKind.PROTOCOL, code="TOOL_ERROR_UNCODED", message=text[:500])


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
    if isinstance(exc, Refused):
        return _classify_status(exc.status, exc.challenge)
    if isinstance(exc, httpx2.HTTPStatusError):
        return _classify_status(exc.response.status_code, exc.response.headers.get("www-authenticate", ""))
    transport_errors = httpx2.TransportError | aiohttp.ClientConnectionError | aiohttp.ClientPayloadError
    if isinstance(exc, transport_errors | ConnectionError | TimeoutError):
        return NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message=type(exc).__name__)
    if isinstance(exc, MalformedAnswer):
        return NodeError(kind=ErrorKind.PROTOCOL, code=exc.code, message=str(exc))
    if isinstance(exc, RuntimeError) and any(words in str(exc) for words in _SDK_OUTPUT_MISMATCH):
        # The SDK checks outputs against the server's current listing before raydag sees them.
        return NodeError(
            kind=ErrorKind.PROTOCOL,
            code="OUTPUT_SCHEMA_MISMATCH",
            message="the tool answered outside the output schema its server lists",
        )
    # Only the exception's type is recorded: its text may echo arguments or tokens.
    return NodeError(kind=ErrorKind.UNKNOWN_EFFECT, code="UNEXPECTED_ERROR", message=type(exc).__name__)


_SDK_OUTPUT_MISMATCH = (
    "Invalid structured content returned by tool",
    "has an output schema but did not return structured content",
)
"""How ``ClientSession.validate_tool_result`` words an output outside the listed schema (a ``RuntimeError``)."""


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

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
(``actors.calls.mcp.stdio``). Each server admits ``max_concurrency`` calls at once from this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, cast

import aiohttp
import anyio
import httpx2
from mcp import Client
from mcp.client._transport import Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import x_mcp_header_map
from mcp_types import CONNECTION_CLOSED, CallToolResult, RequestParamsMeta
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from pydantic import ValidationError

from actors.calls.call import HELD_SESSION, MODERN_PROTOCOL, TaskHandle, ToolCall, ToolOutcome
from actors.calls.mcp.held_calls import HeldCalls
from actors.calls.mcp.outcomes import (
    ConnectionLost,
    classify_failure,
    classify_result,
    unavailable,
)
from actors.calls.mcp.redaction import Redactor, server_secrets
from actors.calls.mcp.session import (
    OwnedSession,
    client_mode,
    is_modern,
    list_all_tools,
    make_client,
    quiet_sdk_logs,
)
from actors.calls.mcp.stateless_post import open_session, post_tool_call
from actors.calls.mcp.stdio import ServerUnavailable, StdioServerProcess, StdioStatus
from actors.calls.mcp.task_state import TaskLost, TasksNotOffered
from actors.calls.mcp.tasks import (
    FOLLOW_S,
    NEGOTIATED,
    TASKS_PROTOCOL,
    cancel_task,
    follow_task,
    open_task_session,
    send_reply,
    session_of,
    start_task,
)
from actors.calls.mcp.watch import CallWatch, Link, current_call, watch_response, watched
from actors.observe.tracing import context_of, tracer
from actors.toolsets.config import (
    BearerAuth,
    HttpServer,
    OAuthClientCredentials,
    RaydagTokenAuth,
    StdioServer,
)
from actors.toolsets.credentials import (
    CredentialUnavailable,
    MemoryTokens,
    client_credentials_flow,
    read_secret,
)
from actors.toolsets.listing import ServerListing, ToolDefinition
from dag.contracts import MAX_OUTPUT_BYTES, ToolCatalogue, ToolContract
from dag.events import ErrorKind, NodeError

_SSL_CONTEXT = ssl.create_default_context()
"""Loading CA certificates costs ~35 ms; a worker builds the context once, not per call."""
ENVELOPE_BYTES = 64 << 10
"""What an answer may carry beyond its output: the JSON-RPC envelope, ``_meta``, a text block's framing."""


def answer_bytes(max_output_bytes: int) -> int:
    """The most bytes read of one answer whose output may be ``max_output_bytes``: an answer may carry its
    output twice (as structured content and as a text block repeating it), and an envelope."""
    return 2 * max_output_bytes + ENVELOPE_BYTES


class _PerCallBearer(httpx2.Auth):
    """Sends the current call's token on each request (refusals are noted by ``watch_response``: the SDK
    reports a refused request only as "Server returned an error response").

    The SDK sends a request's HTTP POST in a copy of the caller's context (``ContextSendStream``), so
    concurrent calls over one shared client each send their own token. Outside a call: no token at all.
    """

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        call = current_call.get()
        request.headers.pop("Authorization", None)
        token = self._token(call)
        if token is not None:
            request.headers["Authorization"] = f"Bearer {token}"
        if call is not None:
            propagate.inject(request.headers)  # the call's span: the server's span joins the run's trace
        yield request

    def _token(self, call: CallWatch | None) -> str | None:
        return call.token if call is not None else None


class _ServerCredentials(_PerCallBearer):
    """One server's own credentials on every request to it: a bearer secret read now (so a rotated file or
    variable takes effect at once), or none at all. Never the task token of a call."""

    def __init__(self, server: str, auth: BearerAuth | None) -> None:
        self._server = server
        self._auth = auth

    def _token(self, call: CallWatch | None) -> str | None:
        return read_secret(self._server, self._auth) if self._auth is not None else None


class McpConnections:
    """Connections to MCP servers for many calls. Use in one event loop, ``async with``; ``call_tool``
    without one opens and closes a set for a single call. ``servers`` are the toolset servers calls may
    name; ``start`` starts the stdio ones now rather than on their first call."""

    def __init__(
        self,
        servers: Sequence[HttpServer | StdioServer] = (),
        *,
        sdk_calls: bool = False,
        hold_questions: bool = False,
    ) -> None:
        """``sdk_calls``: make 2026-07-28 calls to ``mcp_url`` through the SDK client rather than as one POST
        each (``actors.calls.mcp.stateless_post``); the benchmark compares the two. ``hold_questions``: a
        server's question within a plain call is held for a person (``actors.calls.mcp.held_calls``), which
        only a long-lived process can do (a caller, the supervisor's loop); without it, it is declined."""
        quiet_sdk_logs()
        self._held = HeldCalls() if hold_questions else None
        self._sdk_calls = sdk_calls
        self._http = _http_client(_PerCallBearer(), _shared_timeout_s(servers))
        self._posts: aiohttp.ClientSession | None = None
        """One-POST calls' session (``stateless_post``), opened on the first such call, on its loop."""
        self._sessions: dict[str, OwnedSession] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._servers = {server.name: server for server in servers}
        self._limits = {server.name: asyncio.Semaphore(server.max_concurrency) for server in servers}
        self._own_http: dict[str, httpx2.AsyncClient] = {}
        self._oauth_tokens: dict[str, MemoryTokens] = {}
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
        reset = current_call.set(CallWatch(token=token))
        try:
            async with self._limits[server]:
                if isinstance(spec, StdioServer):
                    listing = await list_all_tools(await self._stdio_process(spec).client(), server)
                elif self._session_per_call(spec):
                    async with self._fresh_client(spec) as (client, _):
                        listing = await list_all_tools(client, server)
                else:
                    _, client = await self._shared(
                        spec.name, lambda link: self._http_client(spec, link), listed=True
                    )
                    listing = await list_all_tools(client, server)
            return self._redacted(listing, token).renamed(spec.renames)
        finally:
            current_call.reset(reset)

    def _redacted(self, listing: ServerListing, token: str | None) -> ServerListing:
        """``listing`` without the secrets its server was sent (a description may repeat them too)."""
        spec = self._servers[listing.server]
        tokens = self._oauth_tokens.get(spec.name)
        redactor = Redactor((token, *server_secrets(spec), *(tokens.secrets() if tokens else ())))
        if not redactor:
            return listing
        tools = []
        for tool in listing.tools:
            definition = tool.definition
            redacted = redactor.value(definition)
            tools.append(
                tool
                if redacted is definition
                else dataclasses.replace(ToolDefinition.of(redacted), task_support=tool.task_support)
            )
        return dataclasses.replace(listing, tools=tuple(tools))

    async def __aenter__(self) -> McpConnections:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._held is not None:
            self._held.close()
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
        """Call one tool and classify what happened; never raises for a failure of the call itself. Nothing
        the server sent back is kept with a secret it was sent in it (``actors.calls.mcp.redaction``)."""
        started = datetime.now(UTC)
        contract = catalogue.get(call.tool)
        bound = contract.max_output_bytes if contract is not None else MAX_OUTPUT_BYTES
        watch = CallWatch(token=call.token or None, max_answer_bytes=answer_bytes(bound))
        reset = current_call.set(watch)
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
        task: TaskHandle | None = None
        try:
            redactor = self._redactor(call)
            try:
                with anyio.fail_after(call.timeout_s):
                    result = await self._send(call, contract)
                if isinstance(result, TaskHandle):
                    output, task, error = None, result, _cancelled(result)
                else:
                    output, error = classify_result(call.tool, result, catalogue[call.tool], redactor)
            except TaskLost as exc:
                output, error = None, NodeError(kind=ErrorKind.TRANSIENT, code="TASK_LOST", message=str(exc))
            except TasksNotOffered as exc:
                output, error = (
                    None,
                    NodeError(kind=ErrorKind.PROTOCOL, code="TASKS_NOT_OFFERED", message=str(exc)),
                )
            except TimeoutError:
                message = f"no answer within {call.timeout_s:g}s"
                output, error = None, NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message=message)
            except (ServerUnavailable, CredentialUnavailable) as exc:
                output, error = None, unavailable(exc)
            except Exception as exc:  # a failed call must become a recorded outcome, not a lost task
                output, error = None, classify_failure(exc, watch)
            if error is not None:
                error = redactor.error(error)
        finally:
            current_call.reset(reset)
            otel_context.detach(attached)
            if error is not None:
                span.set_attribute("raydag.error_kind", error.kind.value)
                span.set_attribute("raydag.error_code", error.code)
                span.set_status(Status(StatusCode.ERROR, error.code))
            span.end()
        return ToolOutcome(
            output=output, error=error, started_at=started, finished_at=datetime.now(UTC), task=task
        )

    def _redactor(self, call: ToolCall) -> Redactor:
        """The secrets this call's server may echo: the call's token, and the server's own."""
        spec = self._servers.get(call.server) if call.server is not None else None
        if spec is None:
            return Redactor((call.token,))
        tokens = self._oauth_tokens.get(spec.name)
        return Redactor((call.token, *server_secrets(spec), *(tokens.secrets() if tokens else ())))

    async def _send(self, call: ToolCall, contract: ToolContract | None) -> CallToolResult | TaskHandle:
        spec = self._servers.get(call.server) if call.server is not None else None
        if (
            call.task is not None
            and call.task.session is not None
            and call.task.session.startswith(HELD_SESSION)
        ):
            return await self._follow_held(call)
        if spec is not None:
            remote = spec.server_name(call.tool)
            if remote != call.tool:  # offered under a name of the operator's: the server knows its own
                call = dataclasses.replace(call, tool=remote)
            if call.task is not None:  # following a task holds none of the server's call slots
                return await self._follow(spec, call.task, call.timeout_s, call.reply, stop=call.stop)
            if call.as_task:
                async with self._limits[spec.name]:
                    return await self._start_task(spec, call)
            if isinstance(spec, HttpServer) and self._posts_directly(spec, contract):
                async with self._limits[spec.name]:
                    return await post_tool_call(
                        self._post_session(),
                        spec.url,
                        call.token,
                        call.tool,
                        call.args,
                        _read_at_most(),
                        meta=call.meta,
                    )
            server, sent = spec, call

            async def limited() -> CallToolResult:
                async with self._limits[server.name]:
                    return await self._send_to(server, sent)

            return await self._held_open(call, spec.name, limited, stdio=isinstance(spec, StdioServer))
        if call.protocol != MODERN_PROTOCOL:

            async def once() -> CallToolResult:
                transport = streamable_http_client(
                    call.mcp_url, http_client=self._http, max_sse_event_size=None
                )
                return await _call_once(transport, call.protocol, call)

            return await self._held_open(call, call.mcp_url, once)
        url = call.mcp_url
        if not self._sdk_calls:
            return await post_tool_call(
                self._post_session(), url, call.token, call.tool, call.args, _read_at_most(), meta=call.meta
            )
        return await self._call_shared(url, lambda link: self._modern_client(url, link), call)

    async def _held_open(
        self,
        call: ToolCall,
        server: str,
        send: Callable[[], Awaitable[CallToolResult]],
        *,
        stdio: bool = False,
    ) -> CallToolResult | TaskHandle:
        """A plain call, which its server's question holds open where this process can hold it: its result, or
        its handle once the server asks (``actors.calls.mcp.held_calls``)."""
        if self._held is None:
            return await send()
        return await self._held.call(server, call.tool, send, timeout_s=call.timeout_s, stdio=stdio)

    async def _follow_held(self, call: ToolCall) -> CallToolResult | TaskHandle:
        """A held plain call followed on: only the process holding it knows it (else ``TaskLost``)."""
        assert call.task is not None
        if self._held is None:
            raise TaskLost(
                f"call {call.task.task_id} of {call.task.server} was held by a process that has ended"
            )
        within_s = min(FOLLOW_S, call.timeout_s / 2)
        return await self._held.follow(
            call.task, call.reply, within_s=within_s, stop=call.stop, token=call.token or None
        )

    async def _start_task(
        self, spec: HttpServer | StdioServer, call: ToolCall
    ) -> TaskHandle | CallToolResult:
        """``call`` started as a task in a session of its own (``actors.calls.mcp.tasks``): in the form of
        Tasks of the server's era (a server pinned to 2026-07-28 speaks the extension; one of ``auto`` does if
        it advertises it)."""
        if isinstance(spec, StdioServer):
            return await (await self._stdio_process(spec).tasks()).start(call.tool, call.args, call.meta)
        bound = _read_at_most()
        protocol = spec.protocol if spec.protocol in (MODERN_PROTOCOL, NEGOTIATED) else TASKS_PROTOCOL
        session = await open_task_session(self._http_for(spec), spec.url, max_bytes=bound, protocol=protocol)
        return await start_task(session, spec.name, call.tool, call.args, call.meta, max_bytes=bound)

    async def _follow(
        self,
        spec: HttpServer | StdioServer,
        handle: TaskHandle,
        timeout_s: float,
        reply: Mapping[str, Any] | None = None,
        *,
        stop: bool = False,
    ) -> CallToolResult | TaskHandle:
        """The task's result once it ended, or its handle once its status changed (``reply``: a person's
        answer to its question, sent first; ``stop``: the task is cancelled instead of followed). Cancelled
        (the run stopped, or its deadline came), the follower asks the server to stop the task."""
        if isinstance(spec, StdioServer):
            return await self._follow_stdio(spec, handle, timeout_s, reply, stop=stop)
        bound = _read_at_most()
        session = session_of(self._http_for(spec), spec.url, handle)
        if stop:
            if reply is not None:
                with contextlib.suppress(TaskLost):
                    await send_reply(session, handle, reply, max_bytes=bound)
            await cancel_task(session, handle, max_bytes=bound)
            return dataclasses.replace(handle, status="cancelled", question=None)
        try:
            return await follow_task(
                session, handle, within_s=min(FOLLOW_S, timeout_s / 2), max_bytes=bound, reply=reply
            )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await cancel_task(session, handle, max_bytes=bound)
            raise

    async def _follow_stdio(
        self,
        spec: StdioServer,
        handle: TaskHandle,
        timeout_s: float,
        reply: Mapping[str, Any] | None,
        *,
        stop: bool,
    ) -> CallToolResult | TaskHandle:
        """``_follow`` for a task of a stdio server: only the process incarnation that started it knows it
        (``actors.calls.mcp.stdio_tasks``); any other is ``TaskLost`` at once."""
        tasks = self._stdio_process(spec).running_tasks()
        if stop:
            if tasks is not None:
                await tasks.cancel(handle, reply)
            return dataclasses.replace(handle, status="cancelled", question=None)
        if tasks is None:
            raise TaskLost(
                f"task {handle.task_id} lived in a process of stdio server {spec.name} that has ended"
            )
        try:
            return await tasks.follow(handle, within_s=min(FOLLOW_S, timeout_s / 2), reply=reply)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await tasks.cancel(handle)
            raise

    async def _send_to(self, spec: HttpServer | StdioServer, call: ToolCall) -> CallToolResult:
        if isinstance(spec, StdioServer):
            # A lost connection is what the transport says of this call (``CallWatch.cut_off``), never a
            # code; the session ends by itself and its server is restarted (``actors.calls.mcp.stdio``).
            return await _call(await self._stdio_process(spec).client(), call)
        if self._session_per_call(spec):
            async with self._fresh_client(spec) as (client, link):
                return await _call_over(client, link, call)
        return await self._call_shared(
            spec.name, lambda link: self._http_client(spec, link), call, listed=True
        )

    async def _call_shared(
        self, key: str, connect: Callable[[Link], Client], call: ToolCall, *, listed: bool = False
    ) -> CallToolResult:
        session, client = await self._shared(key, connect, listed=listed)
        try:
            return await _call_over(client, session.link, call)
        except (MCPError, ValidationError):
            raise  # the server's answer, however wrong: the session stays
        except Exception:  # the session's transport is gone (or broken): the next call starts afresh
            await self._discard(key, session)
            raise

    def _modern_client(self, url: str, link: Link) -> Client:
        transport = streamable_http_client(
            url, http_client=self._http, terminate_on_close=False, max_sse_event_size=None
        )
        return make_client(watched(transport, link), MODERN_PROTOCOL)

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
    async def _fresh_client(self, spec: HttpServer) -> AsyncIterator[tuple[Client, Link]]:
        mode = client_mode(self._eras.get(spec.name, spec.protocol))
        link = Link()
        transport = streamable_http_client(spec.url, http_client=self._http, max_sse_event_size=None)
        async with make_client(watched(transport, link), mode) as client:
            self._eras[spec.name] = client.protocol_version if is_modern(client) else "2025-11-25"
            yield client, link

    def _http_client(self, spec: HttpServer, link: Link) -> Client:
        """An SDK client shared by every call to ``spec``, over ``_http_for(spec)``."""
        transport = streamable_http_client(
            spec.url, http_client=self._http_for(spec), terminate_on_close=False, max_sse_event_size=None
        )
        return make_client(watched(transport, link), client_mode(self._eras.get(spec.name, spec.protocol)))

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
                tokens = self._oauth_tokens[spec.name] = MemoryTokens()
                auth = client_credentials_flow(spec.name, spec.url, spec.auth, tokens)
            else:
                auth = _ServerCredentials(spec.name, spec.auth if isinstance(spec.auth, BearerAuth) else None)
            http = self._own_http[spec.name] = _http_client(auth, max(30.0, spec.timeouts.call_s))
        return http

    def _stdio_process(self, spec: StdioServer) -> StdioServerProcess:
        process = self._stdio.get(spec.name)
        if process is None:
            plain = functools.partial(self._held.ask_sole, spec.name) if self._held is not None else None
            process = self._stdio[spec.name] = StdioServerProcess(spec, plain=plain)
        return process

    async def _shared(
        self, key: str, connect: Callable[[Link], Client], *, listed: bool = False
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


def _shared_timeout_s(servers: Sequence[HttpServer | StdioServer]) -> float:
    """The task-token client's timeout: at least 30 s, and as long as the longest ``call_s`` of the servers
    it serves, as a server's own client is. A call's own deadline bounds it (``call_s``); the client must not
    cut it sooner, as it would a plain call's response stream that says nothing while its question waits for
    a person (``actors.calls.mcp.held_calls``)."""
    calls = [
        server.timeouts.call_s
        for server in servers
        if isinstance(server, HttpServer) and isinstance(server.auth, RaydagTokenAuth)
    ]
    return max([30.0, *calls])


def _http_client(auth: httpx2.Auth, timeout_s: float) -> httpx2.AsyncClient:
    """An HTTP client whose every response is watched (``actors.calls.mcp.watch``)."""
    return httpx2.AsyncClient(
        auth=auth,
        timeout=httpx2.Timeout(timeout_s),
        verify=_SSL_CONTEXT,
        event_hooks={"response": [watch_response]},
    )


def _cancelled(task: TaskHandle) -> NodeError | None:
    """A task that ended cancelled, not by raydag (whose cancellation records no outcome): the server stopped
    it, and no result will come."""
    if task.status != "cancelled":
        return None
    detail = f": {task.message}" if task.message else ""
    return NodeError(
        kind=ErrorKind.PROTOCOL,
        code="TASK_CANCELLED",
        message=f"the server cancelled task {task.task_id}{detail}",
    )


def _read_at_most() -> int:
    """The current call's bound on its answer."""
    watch = current_call.get()
    return watch.max_answer_bytes if watch is not None else answer_bytes(MAX_OUTPUT_BYTES)


async def _call(client: Client, call: ToolCall) -> CallToolResult:
    if call.meta:
        return await client.call_tool(call.tool, call.args, meta=cast(RequestParamsMeta, dict(call.meta)))
    return await client.call_tool(call.tool, call.args)


async def _call_over(client: Client, link: Link, call: ToolCall) -> CallToolResult:
    """``call`` over an HTTP session's ``client``; a closed connection counts as lost only if its transport
    says so."""
    try:
        return await _call(client, call)
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED and link.lost:
            raise ConnectionLost(f"the connection to the server of {call.tool} was lost") from None
        raise


async def _call_once(transport: Transport, mode: str, call: ToolCall) -> CallToolResult:
    """``call`` over a session opened for it alone."""
    link = Link()
    async with make_client(watched(transport, link), mode) as client:
        return await _call_over(client, link, call)

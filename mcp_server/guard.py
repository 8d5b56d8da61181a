"""The HTTP guard in front of the MCP endpoint: pure ASGI middleware that never buffers a response.

Every request passes these checks, in this order, before the SDK sees it:

1. with auth switched off (tests only), the request must have arrived on a loopback socket (403);
2. ``Host`` and ``Origin`` against the allow-lists (421 / 403), so a DNS-rebinding page learns nothing more;
3. the body, read whole up to ``max_body_bytes`` (413) and parsed once (400 if ambiguous);
4. the bearer task token (401 ``invalid_token``);
5. the scope the call or read needs (403 ``insufficient_scope``);
6. the tenant's concurrency and rate limits (429 with ``Retry-After``);
7. for ``tools/call``, the token's first use (401 ``invalid_token``: a replay).

The request then goes on with the body replayed, the verified claims in ``auth.current_claims`` and without
its ``Authorization`` header: nothing downstream can read, log or forward the token.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.inbound import find_duplicated_routing_header
from mcp_types.jsonrpc import HEADER_MISMATCH
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind
from starlette.requests import Request

from dag.tokens import RESOURCE_READER, TaskClaims, TaskTokens, TokenInvalid
from mcp_server._asgi import respond_json
from mcp_server.auth import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    bearer,
    current_claims,
    insufficient_scope_challenge,
    invalid_token_challenge,
    missing_token_challenge,
)
from mcp_server.evidence import scope_for_uri
from mcp_server.limits import Admission
from mcp_server.rpc import RESOURCES_READ, TOOLS_CALL, BodyRejected, Target, decode, target_of

log = logging.getLogger(__name__)
_TRACER = trace.get_tracer("raydag.mcp_server")
"""The OpenTelemetry API only: the process that hosts the server installs the SDK (its exporter)."""


class TokenUses(Protocol):
    """Where first uses of tokens are recorded (``replay.ReplayCache`` in PostgreSQL)."""

    async def first_use(self, claims: TaskClaims) -> bool: ...


class _Refusal(Exception):
    """A request answered by the guard itself."""

    def __init__(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.headers = dict(headers or {})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class DirectAnswers(Protocol):
    """Requests answered past the SDK once every check has passed (``stateless_call.StatelessCalls``)."""

    async def answer(self, scope: Scope, headers: Mapping[str, str], message: Any, send: Send) -> bool: ...


class TaskAnswers(Protocol):
    """Requests of MCP Tasks, answered past the SDK once every check has passed (``task_requests``)."""

    async def answer(
        self, headers: Mapping[str, str], message: Any, claims: TaskClaims | None, send: Send
    ) -> bool: ...


class McpGuard:
    """See the module docstring for the checks and their order."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tokens: TaskTokens | None,
        security: TransportSecuritySettings,
        max_body_bytes: int,
        scope_of_tool: Mapping[str, str],
        admission: Admission,
        replay: TokenUses,
        direct: DirectAnswers | None = None,
        tasks: TaskAnswers | None = None,
    ) -> None:
        """``tokens=None`` switches authentication off: for the conformance suite on loopback only. ``direct``
        answers the requests it takes once every check has passed, ``tasks`` those of MCP Tasks; the SDK
        answers the rest."""
        self._app = app
        self._tokens = tokens
        self._rebinding = TransportSecurityMiddleware(security)
        self._max_body_bytes = max_body_bytes
        self._scope_of_tool = dict(scope_of_tool)
        self._admission = admission
        self._replay = replay
        self._direct = direct
        self._tasks = tasks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = {
            bytes(name).decode("latin-1"): bytes(value).decode("latin-1") for name, value in scope["headers"]
        }
        # The caller's trace context (a tool task's span) makes this the server side of that call.
        with _TRACER.start_as_current_span(
            "mcp request", context=propagate.extract(headers), kind=SpanKind.SERVER
        ) as span:
            try:
                await self._guarded(scope, receive, send)
            except _Refusal as refusal:
                span.set_attribute("http.response.status_code", refusal.status)
                await respond_json(send, refusal.status, refusal.body, refusal.headers)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._tokens is None and not is_loopback(str((scope.get("server") or ("",))[0])):
            log.error("refused a request on a non-loopback socket: this server runs without authentication")
            raise _Refusal(403, {"error": "forbidden", "error_description": "authentication is switched off"})
        rejected = await self._rebinding.validate_request(Request(scope), is_post=False)
        if rejected is not None:
            await rejected(scope, receive, send)
            return
        # The SDK rejects a routing header sent twice only on its 2026-07-28 path: it routes on the first
        # MCP-Protocol-Version copy, and its 2025-11-25 handshake path never looks for a second. Refused
        # here for both eras, before either reads the request.
        duplicated = find_duplicated_routing_header(
            (bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
            for name, value in scope["headers"]
        )
        if duplicated is not None:
            error = {"code": HEADER_MISMATCH, "message": f"{duplicated} header appears more than once"}
            raise _Refusal(400, {"jsonrpc": "2.0", "id": None, "error": error})
        body = await self._read_body(scope, receive)
        try:
            message = decode(body) if body.strip() else None
            target = target_of(message) if body.strip() else Target(method=None)
            span = trace.get_current_span()
            span.update_name(f"mcp {target.method or scope['method']} {target.tool or ''}".strip())
            if target.tool:
                span.set_attribute("raydag.tool", target.tool)
        except BodyRejected as exc:
            error = {"code": exc.code, "message": exc.message}
            raise _Refusal(400, {"jsonrpc": "2.0", "id": exc.request_id, "error": error}) from None
        if self._tokens is None:
            await self._forward(scope, body, message, receive, send, claims=None)
            return
        claims = self._authenticate(scope)
        self._authorize(claims, target)
        refused = self._admission.enter(claims.tenant_id, time.monotonic())
        if refused is not None:
            log.info("tenant %s over its %s limit", claims.tenant_id, refused.limit)
            raise _Refusal(
                429,
                {
                    "error": "too_many_requests",
                    "limit": refused.limit,
                    "retry_after_s": refused.retry_after_s,
                },
                {"retry-after": str(refused.retry_after_s)},
            )
        try:
            if target.method == TOOLS_CALL:
                await self._first_use(claims)
            await self._forward(scope, body, message, receive, send, claims=claims)
        finally:
            self._admission.leave(claims.tenant_id)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self._max_body_bytes
        too_large = _Refusal(413, {"error": "body_too_large", "max_bytes": limit})
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    def _authenticate(self, scope: Scope) -> TaskClaims:
        assert self._tokens is not None
        token = bearer(scope)
        if token is None:
            raise _Refusal(
                401,
                {"error": "invalid_token", "error_description": "missing bearer token"},
                {"www-authenticate": missing_token_challenge()},
            )
        try:
            return self._tokens.verify(token)
        except TokenInvalid as exc:
            raise _Refusal(
                401,
                {"error": "invalid_token", "error_description": str(exc)},
                {"www-authenticate": invalid_token_challenge(str(exc))},
            ) from None

    def _authorize(self, claims: TaskClaims, target: Target) -> None:
        """The one place that decides scope: what the call or read needs against what the token carries."""
        needed: str | None = None
        if target.method == TOOLS_CALL and target.tool is not None:
            needed = self._scope_of_tool.get(target.tool)  # an unknown tool is the SDK's -32602
        elif target.method == RESOURCES_READ and target.uri is not None:
            if claims.tool != RESOURCE_READER:
                wanted = scope_for_uri(target.uri) or RESOURCE_READER
                _insufficient(
                    claims, wanted, "this token may call one tool; reading needs a resources/read token"
                )
            needed = scope_for_uri(target.uri)  # an unknown scheme is the SDK's resource-not-found
        if needed is not None and needed not in claims.scopes:
            _insufficient(claims, needed, f"{target.tool or target.uri} needs scope {needed}")

    async def _first_use(self, claims: TaskClaims) -> None:
        try:
            first = await self._replay.first_use(claims)
        except Exception as exc:  # fail closed: without the replay cache no tool runs
            log.error("replay cache unavailable (%s); refusing tool calls", type(exc).__name__)
            raise _Refusal(503, {"error": "temporarily_unavailable"}, {"retry-after": "1"}) from None
        if not first:
            log.warning(
                "refused a replayed task token (tenant %s, task %s)", claims.tenant_id, claims.task_id
            )
            description = "invalid task token: it was already used for a tool call"
            raise _Refusal(
                401,
                {"error": "invalid_token", "error_description": description},
                {"www-authenticate": invalid_token_challenge(description)},
            )

    async def _forward(
        self,
        scope: Scope,
        body: bytes,
        message: Any,
        receive: Receive,
        send: Send,
        *,
        claims: TaskClaims | None,
    ) -> None:
        pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        # Field values exclude surrounding whitespace (RFC 9110 section 5.5), whatever the HTTP parser left.
        headers = [
            (name, bytes(value).strip(b" \t"))
            for name, value in scope.get("headers", [])
            if name != b"authorization"
        ]
        forwarded = {**scope, "headers": headers}
        reset = current_claims.set(claims)
        try:
            named: dict[str, str] = {}
            for name, value in headers:  # the first of a repeated header, as Starlette reads one
                named.setdefault(bytes(name).decode("latin-1"), bytes(value).decode("latin-1"))
            if self._tasks is not None and await self._tasks.answer(named, message, claims, send):
                return
            if (
                self._direct is not None
                and claims is not None
                and await self._direct.answer(forwarded, named, message, send)
            ):
                return
            await self._app(forwarded, replay, send)
        finally:
            current_claims.reset(reset)


def _insufficient(claims: TaskClaims, scope: str, description: str) -> None:
    log.info("refused: tenant %s, task %s: %s", claims.tenant_id, claims.task_id, description)
    raise _Refusal(
        403,
        {"error": "insufficient_scope", "scope": scope, "error_description": description},
        {"www-authenticate": insufficient_scope_challenge(scope, description)},
    )

"""Bearer task-token authentication as pure ASGI middleware (it never buffers a response stream)."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp_server.tokens import TaskClaims, TaskTokens, TokenInvalid

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REALM = "raydag-mcp"

current_claims: contextvars.ContextVar[TaskClaims | None] = contextvars.ContextVar(
    "raydag_task_claims", default=None
)


def require_claims() -> TaskClaims:
    """The verified claims of the request being served; tools cannot run without them."""
    claims = current_claims.get()
    if claims is None:
        raise RuntimeError("no verified task token in this request's context")
    return claims


class TaskTokenAuth:
    """Rejects any HTTP request without a valid task token with 401 and ``WWW-Authenticate``."""

    def __init__(self, app: ASGIApp, tokens: TaskTokens) -> None:
        self._app = app
        self._tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        token = _bearer(scope)
        if token is None:
            await _unauthorized(send, f'Bearer realm="{REALM}"', "missing bearer token")
            return
        try:
            claims = self._tokens.verify(token)
        except TokenInvalid as exc:
            description = str(exc).replace('"', "'")
            challenge = f'Bearer realm="{REALM}", error="invalid_token", error_description="{description}"'
            await _unauthorized(send, challenge, description)
            return
        reset = current_claims.set(claims)
        try:
            await self._app(scope, receive, send)
        finally:
            current_claims.reset(reset)


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, credentials = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


async def _unauthorized(send: Send, challenge: str, description: str) -> None:
    body = json.dumps({"error": "invalid_token", "error_description": description}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", challenge.encode("latin-1", "replace")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

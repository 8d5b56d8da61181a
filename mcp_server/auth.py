"""The verified task token of the request being served, and the bearer challenges the guard answers with."""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from dag.tokens import TaskClaims

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REALM = "raydag-mcp"

current_claims: contextvars.ContextVar[TaskClaims | None] = contextvars.ContextVar(
    "raydag_task_claims", default=None
)


def case_of(claims: TaskClaims) -> str | None:
    """The case a token is bound to, if its run's resource names one (``case_id``)."""
    return claims.resource.get("case_id")


def bearer(scope: Scope) -> str | None:
    """The bearer credentials of the request's Authorization header, if it has one."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, credentials = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


def _quoted(text: str) -> str:
    return text.replace("\\", "").replace('"', "'")


def missing_token_challenge() -> str:
    return f'Bearer realm="{REALM}"'


def invalid_token_challenge(description: str) -> str:
    return f'Bearer realm="{REALM}", error="invalid_token", error_description="{_quoted(description)}"'


def insufficient_scope_challenge(scope: str, description: str) -> str:
    """The MCP authorization spec's scope challenge (RFC 6750 section 3.1): the scope names what is missing."""
    return (
        f'Bearer error="insufficient_scope", scope="{_quoted(scope)}", realm="{REALM}", '
        f'error_description="{_quoted(description)}"'
    )

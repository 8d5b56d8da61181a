"""Task tokens: short-lived JWTs the runtime mints for one tool call, and a server built for raydag verifies.

The protocol is raydag's, not any one server's: the runtime mints (``actors``), a server verifies (caseops'
``mcp_server``), and both import it from here, below them.

HS256 is pinned on both sides; ``iss`` and ``aud`` must match exactly; ``exp``/``nbf``/``iat`` are checked
with ``LEEWAY_SECONDS`` of clock skew, and a token may not live longer than ``lifetime_seconds``. Tenant,
subject, run, resource and scopes travel only here, never in tool arguments.

A token's ``tool`` claim names the one tool it may call, or ``RESOURCE_READER`` for a token that reads the
evidence resources of its run's resource (with the scopes it carries) and calls no tool.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import jwt
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dag.errors import RaydagError

ALGORITHM = "HS256"
ISSUER = "raydag"
LEEWAY_SECONDS = 5
LIFETIME_SECONDS = 60
MIN_KEY_BYTES = 32
RESOURCE_READER = "resources/read"
"""The ``tool`` claim of a token that reads its run's MCP resources instead of calling a tool."""
MAX_JTI_LENGTH = 128
_REQUIRED_CLAIMS = [
    "iss",
    "aud",
    "sub",
    "tenant_id",
    "task_id",
    "resource",
    "tool",
    "scope",
    "iat",
    "nbf",
    "exp",
    "jti",
]


class TokenInvalid(RaydagError):
    """A bearer token was missing, malformed, expired, or not meant for this server."""


class TaskClaims(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    iss: str
    aud: str
    sub: str
    tenant_id: str
    task_id: str
    resource: dict[str, str]
    """The run's resource (``{"case_id": "C-102"}``, ``{"root": "/srv/reports"}``): what the call may be about."""
    tool: str
    """The one tool this token may call."""
    scope: str
    iat: int
    nbf: int
    exp: int
    jti: str = Field(min_length=1, max_length=MAX_JTI_LENGTH)

    @property
    def scopes(self) -> frozenset[str]:
        return frozenset(self.scope.split())


@dataclass(frozen=True)
class TaskTokens:
    """Mints and verifies task tokens for one MCP resource (``audience`` is its URL)."""

    key: bytes
    audience: str
    issuer: str = ISSUER
    lifetime_seconds: int = LIFETIME_SECONDS

    def __post_init__(self) -> None:
        if len(self.key) < MIN_KEY_BYTES:
            raise ValueError(f"the token key must be at least {MIN_KEY_BYTES} bytes")

    def mint(
        self,
        *,
        subject: str,
        tenant_id: str,
        task_id: str,
        resource: Mapping[str, str],
        tool: str,
        scopes: frozenset[str] | set[str],
        now: int | None = None,
    ) -> str:
        issued = int(time.time()) if now is None else now
        claims = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": subject,
            "tenant_id": tenant_id,
            "task_id": task_id,
            "resource": dict(resource),
            "tool": tool,
            "scope": " ".join(sorted(scopes)),
            "iat": issued,
            "nbf": issued,
            "exp": issued + self.lifetime_seconds,
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self.key, algorithm=ALGORITHM)

    def verify(self, token: str) -> TaskClaims:
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=[ALGORITHM],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": _REQUIRED_CLAIMS, "strict_aud": True},
            )
        except jwt.PyJWTError as exc:
            raise TokenInvalid(f"invalid task token: {exc}") from None
        try:
            verified = TaskClaims.model_validate(claims)
        except ValidationError as exc:
            raise TokenInvalid(f"invalid task token: {exc.error_count()} malformed claim(s)") from None
        # A long-lived token would also outlive its replay-cache entry's purpose; refuse it outright.
        if verified.exp - verified.iat > self.lifetime_seconds:
            raise TokenInvalid(f"invalid task token: it lives longer than {self.lifetime_seconds} s")
        return verified

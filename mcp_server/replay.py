"""The replay cache: each task token (by ``jti``) is accepted for one tool call, across every server replica.

It lives in PostgreSQL because every replica already holds a pool to it and it is the system of record the
tools read: one ``INSERT ... ON CONFLICT DO NOTHING`` per call decides atomically which request used a token
first, with no extra service to run, and survives a replica's restart. A row is kept only until its token
expires (plus the verifier's clock skew); the servers prune expired rows, so the table stays bounded by the
tool calls of one token lifetime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import asyncpg

from mcp_server.tokens import LEEWAY_SECONDS, TaskClaims

log = logging.getLogger(__name__)


class ReplayCache:
    """Records used tokens in ``task_token_uses`` (migration 0005)."""

    def __init__(self, pool: Callable[[], asyncpg.Pool]) -> None:
        """``pool`` returns the server's pool, which exists only while the server runs."""
        self._pool = pool

    async def first_use(self, claims: TaskClaims) -> bool:
        """Record a use of the token; ``True`` only for its first use anywhere."""
        inserted = await self._pool().fetchval(
            """INSERT INTO task_token_uses (jti, tenant_id, expires_at)
               VALUES ($1, $2, to_timestamp($3))
               ON CONFLICT (jti) DO NOTHING
               RETURNING true""",
            claims.jti,
            claims.tenant_id,
            claims.exp + LEEWAY_SECONDS,
        )
        return inserted is True

    async def prune(self) -> int:
        """Delete the rows of tokens that can no longer verify; return how many went."""
        # A minute's margin: the database's clock may run ahead of the replicas that verify tokens.
        status: str = await self._pool().execute(
            "DELETE FROM task_token_uses WHERE expires_at < now() - interval '1 minute'"
        )
        deleted = int(status.rsplit(" ", 1)[-1])
        if deleted:
            log.debug("pruned %d expired task-token uses", deleted)
        return deleted

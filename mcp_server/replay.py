"""The replay cache: each task token (by ``jti``) is accepted for one tool call, across every server replica.

It lives in PostgreSQL because every replica already holds a pool to it and it is the system of record the
tools read: one ``INSERT ... ON CONFLICT DO NOTHING`` decides atomically which request used a token first,
with no extra service to run, and survives a replica's restart. A row is kept only until its token expires
(plus the verifier's clock skew); the servers prune expired rows, so the table stays bounded by the tool
calls of one token lifetime.

Uses are written by group commit: a use that finds no write in flight is written at once, alone; uses that
arrive while writes are in flight wait for one to end and go together, in one statement. A lone call pays
one round trip as before, and a burst of calls (a wide layer of a DAG) pays a few instead of one each: the
statement's CPU, on the server and in PostgreSQL, was a quarter of the tool server's per call
(docs/BENCHMARKS.md, "MCP tool-call latency").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import asyncpg

from dag.tokens import LEEWAY_SECONDS, TaskClaims

log = logging.getLogger(__name__)

WRITERS = 2
"""Writes in flight at once: one may take the next batch while another is on the wire; the pool holds more."""


class ReplayCache:
    """Records used tokens in ``task_token_uses`` (migration 0005)."""

    def __init__(self, pool: Callable[[], asyncpg.Pool], *, writers: int = WRITERS) -> None:
        """``pool`` returns the server's pool, which exists only while the server runs."""
        self._pool = pool
        self._writers = writers
        self._writers_running: set[asyncio.Task[None]] = set()
        self._waiting: list[tuple[TaskClaims, asyncio.Future[bool]]] = []

    async def first_use(self, claims: TaskClaims) -> bool:
        """Record a use of the token; ``True`` only for its first use anywhere."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((claims, future))
        if len(self._writers_running) < self._writers:
            writer = asyncio.get_running_loop().create_task(self._write_while_waiting())
            self._writers_running.add(writer)
            writer.add_done_callback(self._writers_running.discard)
        return await future

    async def _write_while_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                firsts = await self._record([claims for claims, _ in batch])
            except BaseException as exc:  # every use of the batch fails as its statement did
                for _, future in batch:
                    if future.done():
                        continue
                    if isinstance(exc, Exception):
                        future.set_exception(exc)
                    else:
                        future.cancel()
                if not isinstance(exc, Exception):
                    raise
                continue
            for claims, future in batch:
                if not future.done():  # a caller that gave up (cancelled) has no answer to take
                    future.set_result(claims.jti in firsts)
                firsts.discard(claims.jti)  # the same token twice in one batch: the first use wins

    async def _record(self, uses: list[TaskClaims]) -> set[str]:
        """Insert the uses; the ``jti`` of each token used for the first time."""
        distinct: dict[str, TaskClaims] = {}
        for claims in uses:  # one row per token
            distinct.setdefault(claims.jti, claims)
        rows = await self._pool().fetch(
            """INSERT INTO task_token_uses (jti, tenant_id, expires_at)
               SELECT jti, tenant_id, to_timestamp(expires)
               FROM unnest($1::text[], $2::text[], $3::float8[]) AS uses (jti, tenant_id, expires)
               ON CONFLICT (jti) DO NOTHING
               RETURNING jti""",
            list(distinct),
            [claims.tenant_id for claims in distinct.values()],
            [float(claims.exp + LEEWAY_SECONDS) for claims in distinct.values()],
        )
        return {row["jti"] for row in rows}

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

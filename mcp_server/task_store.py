"""caseops' MCP tasks (both forms), kept in PostgreSQL: what a task is, who may see it, how it moves.

The server is stateless HTTP and issues no session, so a task cannot live in a session's memory as in the
reference server: it is a row of ``caseops_tasks``, keyed by a random id and found only with a token of the
tenant, case and tool that started it (any other token is told the task does not exist, as an unknown id).
Any replica answers ``tasks/get``, ``tasks/result`` and ``tasks/cancel``; the work itself runs in the replica
that took the ``tools/call``, which reads the row between stages and stops once it says ``cancelled``.

A task of the 2026-07-28 extension may ask its client for input: the work turns it ``input_required`` with the
request in the row (``inputRequests`` of ``tasks/get``), and waits until a ``tasks/update`` writes the answer
there and turns it ``working`` again (``TaskRun.ask``). The 2025-11-25 form delivers a server's request on a
session's stream, which this sessionless server has none of: its tasks never ask.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dag.fingerprint import canonical_json
from dag.tokens import TaskClaims
from mcp_server.auth import case_of

TERMINAL = frozenset({"completed", "failed", "cancelled"})
MAX_TTL_MS = 24 * 3600 * 1000
"""The longest a task is kept (a client may ask for less; ``ttl`` absent asks for this)."""
POLL_INTERVAL_MS = 500


def granted_ttl(requested: Any) -> int:
    """The ``ttl`` granted for a request's ``task.ttl``: what was asked, within one millisecond and a day."""
    if isinstance(requested, bool) or not isinstance(requested, int):
        return MAX_TTL_MS
    return min(max(requested, 1), MAX_TTL_MS)


class TaskCancelled(Exception):
    """The task was cancelled (or is gone): its work stops where it stands and writes nothing more."""


@dataclass(frozen=True)
class Owner:
    """Whose a task is: the tenant, case and tool of the token that started it."""

    tenant_id: str
    case_id: str
    tool: str

    @classmethod
    def of(cls, claims: TaskClaims) -> Owner:
        return cls(claims.tenant_id, str(case_of(claims)), claims.tool)


def task_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """A task row as the wire's ``Task`` (camelCase; ``statusMessage`` only when there is one)."""
    task: dict[str, Any] = {
        "taskId": row["task_id"],
        "status": row["status"],
        "createdAt": _iso(row["created_at"]),
        "lastUpdatedAt": _iso(row["updated_at"]),
        "ttl": row["ttl_ms"],
        "pollInterval": row["poll_interval_ms"],
    }
    if row["status_message"] is not None:
        task["statusMessage"] = row["status_message"]
    return task


def extension_task_json(row: Mapping[str, Any], *, with_result: bool = False) -> dict[str, Any]:
    """A task row as the 2026-07-28 extension's ``Task`` (``ttlMs``, ``pollIntervalMs``), ``with_result``
    inlined once it ended, as ``tasks/get`` answers it. A caseops task that failed ended with a tool's error
    (its result ``isError``), which the extension reports as ``completed`` with that result: its ``failed``
    is for a JSON-RPC error alone."""
    task = task_json(row)
    task["ttlMs"] = task.pop("ttl")
    task["pollIntervalMs"] = task.pop("pollInterval")
    if row["status"] == "failed":
        task["status"] = "completed"
    asked = row.get("input_requests")
    if row["status"] == "input_required" and isinstance(asked, str):
        task["inputRequests"] = json.loads(asked)
    stored = row.get("result")
    if with_result and row["status"] in ("completed", "failed") and isinstance(stored, str):
        task["result"] = tool_result(json.loads(stored), is_error=bool(row["is_error"]))
    return task


def tool_result(payload: Mapping[str, Any], *, is_error: bool) -> dict[str, Any]:
    """A stored answer as the ``CallToolResult`` it was: structured, with the same JSON as its text."""
    return {
        "content": [{"type": "text", "text": canonical_json(dict(payload))}],
        "structuredContent": dict(payload),
        "isError": is_error,
    }


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


_COLUMNS = """task_id, status, status_message, created_at, updated_at, ttl_ms, poll_interval_ms, result,
              is_error, stages_done, input_requests"""
_LIVE = "created_at + ttl_ms * interval '1 millisecond' > now()"


class TaskStore:
    """The rows of ``caseops_tasks``; every query but the worker's own is scoped to the task's owner."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def create(self, owner: Owner, ttl_ms: int) -> dict[str, Any]:
        row = await self._pool.fetchrow(
            f"""INSERT INTO caseops_tasks (tenant_id, task_id, case_id, tool, ttl_ms, poll_interval_ms,
                                           status_message)
                VALUES ($1, $2, $3, $4, $5, $6, 'queued') RETURNING {_COLUMNS}""",
            owner.tenant_id,
            f"task-{secrets.token_hex(16)}",
            owner.case_id,
            owner.tool,
            ttl_ms,
            POLL_INTERVAL_MS,
        )
        assert row is not None
        return dict(row)

    async def get(self, owner: Owner, task_id: str) -> dict[str, Any] | None:
        """The task, or ``None`` for one that does not exist for ``owner`` (unknown, expired or another's)."""
        row = await self._pool.fetchrow(
            f"""SELECT {_COLUMNS} FROM caseops_tasks
                WHERE tenant_id = $1 AND task_id = $2 AND case_id = $3 AND tool = $4 AND {_LIVE}""",
            owner.tenant_id,
            task_id,
            owner.case_id,
            owner.tool,
        )
        return None if row is None else dict(row)

    async def list(self, owner: Owner) -> list[dict[str, Any]]:
        rows = await self._pool.fetch(
            f"""SELECT {_COLUMNS} FROM caseops_tasks
                WHERE tenant_id = $1 AND case_id = $2 AND tool = $3 AND {_LIVE}
                ORDER BY created_at, task_id LIMIT 100""",
            owner.tenant_id,
            owner.case_id,
            owner.tool,
        )
        return [dict(row) for row in rows]

    async def cancel(self, owner: Owner, task_id: str) -> dict[str, Any] | None:
        """The task, cancelled if it had not ended (a task that ended stays as it was: the caller sees it)."""
        row = await self._pool.fetchrow(
            f"""UPDATE caseops_tasks SET status = 'cancelled', status_message = 'cancelled by the client',
                                         updated_at = now()
                WHERE tenant_id = $1 AND task_id = $2 AND case_id = $3 AND tool = $4
                  AND status IN ('working', 'input_required')
                RETURNING {_COLUMNS}""",
            owner.tenant_id,
            task_id,
            owner.case_id,
            owner.tool,
        )
        return dict(row) if row is not None else await self.get(owner, task_id)

    async def answer(self, owner: Owner, task_id: str, responses: Mapping[str, Any]) -> dict[str, Any] | None:
        """Take a ``tasks/update``'s answers: one to the request the task waits on (a caseops task asks one at a
        time) is written under its key and turns the task ``working`` again, in one update; an answer to any
        other key is ignored, as the extension says. The task as it was, or ``None`` for one ``owner`` cannot
        see."""
        row = await self.get(owner, task_id)
        asked = row.get("input_requests") if row is not None else None
        outstanding = json.loads(asked) if isinstance(asked, str) else {}
        taken = {
            key: value for key, value in responses.items() if key in outstanding and isinstance(value, dict)
        }
        if taken:
            await self._pool.execute(
                """UPDATE caseops_tasks SET input_responses = input_responses || $3::jsonb, input_requests = NULL,
                                            status = 'working', status_message = 'answered', updated_at = now()
                   WHERE tenant_id = $1 AND task_id = $2 AND status = 'input_required'""",
                owner.tenant_id,
                task_id,
                json.dumps(taken),
            )
        return row

    async def finish(
        self, tenant_id: str, task_id: str, result: Mapping[str, Any], *, is_error: bool
    ) -> None:
        """End a task that has not ended with the tool's answer; one cancelled or sealed stays as it is."""
        await self._pool.execute(
            """UPDATE caseops_tasks SET status = $3, result = $4, is_error = $5, updated_at = now(),
                                        status_message = $6, input_requests = NULL
               WHERE tenant_id = $1 AND task_id = $2 AND status IN ('working', 'input_required')""",
            tenant_id,
            task_id,
            "failed" if is_error else "completed",
            json.dumps(dict(result)),
            is_error,
            "failed" if is_error else "completed",
        )

    async def stopped(self, tenant_id: str, task_id: str) -> None:
        """Record that the task's work has stopped (it ended, failed, or saw its cancellation)."""
        await self._pool.execute(
            "UPDATE caseops_tasks SET stopped_at = now() WHERE tenant_id = $1 AND task_id = $2",
            tenant_id,
            task_id,
        )


@dataclass(frozen=True)
class TaskRun:
    """What a tool's handler sees of the task it runs as: report a stage, ask its client, seal its effect with the
    task's end."""

    pool: asyncpg.Pool
    tenant_id: str
    task_id: str
    can_ask: bool = False
    """Whether the client can be asked for input (a task of the 2026-07-28 extension)."""

    async def stage(self, message: str) -> None:
        """Record the stage the work enters (its ``statusMessage``); ``TaskCancelled`` if it was cancelled."""
        done = await self.pool.fetchval(
            """UPDATE caseops_tasks SET status_message = $3, stages_done = stages_done + 1, updated_at = now()
               WHERE tenant_id = $1 AND task_id = $2 AND status = 'working' RETURNING stages_done""",
            self.tenant_id,
            self.task_id,
            message,
        )
        if done is None:
            raise TaskCancelled(self.task_id)

    async def ask(self, key: str, message: str, request: Mapping[str, Any]) -> dict[str, Any]:
        """Put ``request`` (a server-to-client request: an elicitation) to the client under ``key`` and wait for
        its answer: the task is ``input_required`` (``message`` its status) until a ``tasks/update`` answers
        it. ``TaskCancelled`` if it is cancelled, or expires, first."""
        assert self.can_ask, "only a task of the 2026-07-28 extension can ask its client"
        interval_ms = await self.pool.fetchval(
            """UPDATE caseops_tasks SET status = 'input_required', status_message = $3, input_requests = $4,
                                        updated_at = now()
               WHERE tenant_id = $1 AND task_id = $2 AND status = 'working' RETURNING poll_interval_ms""",
            self.tenant_id,
            self.task_id,
            message,
            json.dumps({key: dict(request)}),
        )
        if interval_ms is None:
            raise TaskCancelled(self.task_id)
        while True:
            await asyncio.sleep(interval_ms / 1000)
            row = await self.pool.fetchrow(
                f"""SELECT status, input_responses -> $3::text AS response FROM caseops_tasks
                    WHERE tenant_id = $1 AND task_id = $2 AND {_LIVE}""",
                self.tenant_id,
                self.task_id,
                key,
            )
            if row is None or row["status"] in TERMINAL:
                raise TaskCancelled(self.task_id)
            if row["response"] is not None:
                answer: dict[str, Any] = json.loads(row["response"])
                return answer

    async def complete_in(self, connection: asyncpg.Connection, output: Mapping[str, Any]) -> None:
        """Complete the task inside the transaction that writes its effect: the row lock orders it against a
        ``tasks/cancel``, so either the cancel wins and nothing is written, or the task ends completed."""
        done = await connection.fetchval(
            """UPDATE caseops_tasks SET status = 'completed', status_message = 'completed', result = $3,
                                        updated_at = now()
               WHERE tenant_id = $1 AND task_id = $2 AND status = 'working' RETURNING 1""",
            self.tenant_id,
            self.task_id,
            json.dumps(dict(output)),
        )
        if done is None:
            raise TaskCancelled(self.task_id)


current_task: contextvars.ContextVar[TaskRun | None] = contextvars.ContextVar("caseops_task", default=None)
"""The task the tool call being served runs as; ``None`` for a plain call."""

"""Tools' questions to people: one row per question a tool server asked mid-call, decided by one conditional
update.

The run's round records the question (``ask``) before it waits on it; a person decides it through the API, the
CLI or the Python API, which needs no supervisor: the row is the meeting point, as a planner's question's is.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.tool_questions import ToolQuestionState


@dataclass(frozen=True)
class ToolQuestion:
    """One question a tool asked in a run, and what became of it."""

    question_id: str
    run_id: str
    node_id: str
    attempt: int
    task_id: str
    tenant_id: str
    subject: str
    server: str
    tool: str
    message: str
    schema: Mapping[str, Any]
    state: ToolQuestionState
    expires_at: datetime
    content: Mapping[str, Any] | None
    decided_by: str | None
    decided_at: datetime | None
    created_at: datetime


def tool_question_of(row: asyncpg.Record) -> ToolQuestion:
    return ToolQuestion(
        question_id=str(row["question_id"]),
        run_id=str(row["run_id"]),
        node_id=row["node_id"],
        attempt=row["attempt"],
        task_id=row["task_id"],
        tenant_id=row["tenant_id"],
        subject=row["subject"],
        server=row["server"],
        tool=row["tool"],
        message=row["message"],
        schema=row["schema"],
        state=ToolQuestionState(row["state"]),
        expires_at=row["expires_at"],
        content=row["content"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        created_at=row["created_at"],
    )


class ToolQuestionStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def ask(
        self,
        *,
        run_id: str,
        node_id: str,
        attempt: int,
        task_id: str,
        request_id: Any,
        tenant_id: str,
        subject: str,
        server: str,
        tool: str,
        message: str,
        schema: Mapping[str, Any],
        expires_at: datetime,
    ) -> ToolQuestion:
        """The question the server's request ``request_id`` asks in the node's attempt: recorded the first
        time, or the row as it is (a recovered run asks again)."""
        key = json.dumps(request_id, sort_keys=True)

        async def attempt_ask() -> ToolQuestion:
            row = await self._pool.fetchrow(
                """WITH asked AS (
                       INSERT INTO tool_questions (question_id, run_id, node_id, attempt, task_id, request_key,
                           tenant_id, subject, server, tool, message, schema, state, expires_at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'awaiting', $13)
                       ON CONFLICT DO NOTHING
                       RETURNING *
                   )
                   SELECT * FROM asked
                   UNION ALL
                   SELECT * FROM tool_questions
                   WHERE run_id = $2 AND node_id = $3 AND attempt = $4 AND task_id = $5 AND request_key = $6
                     AND NOT EXISTS (SELECT 1 FROM asked)""",
                uuid.uuid4(),
                uuid.UUID(run_id),
                node_id,
                attempt,
                task_id,
                key,
                tenant_id,
                subject,
                server,
                tool,
                message,
                dict(schema),
                expires_at,
            )
            assert row is not None, "the insert or the row it conflicted with"
            return tool_question_of(row)

        return await retrying(
            attempt_ask, window_s=RUN_WINDOW_S, what=f"{node_id}'s question in run {run_id}"
        )

    async def get(self, run_id: str, question_id: str) -> ToolQuestion | None:
        row = await self._pool.fetchrow(
            "SELECT * FROM tool_questions WHERE run_id = $1 AND question_id = $2",
            uuid.UUID(run_id),
            uuid.UUID(question_id),
        )
        return tool_question_of(row) if row is not None else None

    async def of_run(self, run_id: str) -> list[ToolQuestion]:
        """The run's tools' questions, first asked first."""
        rows = await self._pool.fetch(
            "SELECT * FROM tool_questions WHERE run_id = $1 ORDER BY created_at, question_id",
            uuid.UUID(run_id),
        )
        return [tool_question_of(row) for row in rows]

    async def settle(
        self,
        run_id: str,
        question_id: str,
        target: ToolQuestionState,
        *,
        by: str,
        content: Mapping[str, Any] | None = None,
    ) -> ToolQuestion | None:
        """Move the question from ``awaiting`` to ``target`` (answered with ``content``, declined, withdrawn or
        expired): the moved row, or ``None`` if it no longer awaited, or its deadline had passed (unless the
        run settles it)."""
        row = await self._pool.fetchrow(
            """UPDATE tool_questions
               SET state = $3, content = $4, decided_by = $5, decided_at = now()
               WHERE run_id = $1 AND question_id = $2 AND state = 'awaiting'
                 AND ($3 IN ('expired', 'withdrawn') OR expires_at > now())
               RETURNING *""",
            uuid.UUID(run_id),
            uuid.UUID(question_id),
            target.value,
            dict(content) if content is not None else None,
            by,
        )
        return tool_question_of(row) if row is not None else None

"""A planner's questions: one row per question of a run, answered by one conditional update.

The run's driver asks (``ask``) and waits on the row; a person answers through the API or the Python API
(``answer``), which needs no supervisor: the row is the meeting point, as a review's is.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.questions import QuestionState


@dataclass(frozen=True)
class Question:
    """One question of a run, and what became of it."""

    run_id: str
    number: int
    round: int
    tenant_id: str
    subject: str
    text: str
    state: QuestionState
    expires_at: datetime
    answer: str | None
    answered_by: str | None
    answered_at: datetime | None
    created_at: datetime


def _question(row: asyncpg.Record) -> Question:
    return Question(
        run_id=str(row["run_id"]),
        number=row["number"],
        round=row["round"],
        tenant_id=row["tenant_id"],
        subject=row["subject"],
        text=row["text"],
        state=QuestionState(row["state"]),
        expires_at=row["expires_at"],
        answer=row["answer"],
        answered_by=row["answered_by"],
        answered_at=row["answered_at"],
        created_at=row["created_at"],
    )


class QuestionStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def ask(
        self,
        *,
        run_id: str,
        number: int,
        round_number: int,
        tenant_id: str,
        subject: str,
        text: str,
        expires_at: datetime,
    ) -> Question:
        """The run's question ``number``: asked the first time, or the row as it is (a recovered run asks
        again)."""

        async def attempt() -> Question:
            row = await self._pool.fetchrow(
                """WITH asked AS (
                       INSERT INTO questions (run_id, number, round, tenant_id, subject, text, state, expires_at)
                       VALUES ($1, $2, $3, $4, $5, $6, 'awaiting', $7)
                       ON CONFLICT DO NOTHING
                       RETURNING *
                   )
                   SELECT * FROM asked
                   UNION ALL
                   SELECT * FROM questions WHERE run_id = $1 AND number = $2 AND NOT EXISTS (SELECT 1 FROM asked)""",
                uuid.UUID(run_id),
                number,
                round_number,
                tenant_id,
                subject,
                text,
                expires_at,
            )
            assert row is not None, "the insert or the row it conflicted with"
            return _question(row)

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"question {number} of run {run_id}")

    async def get(self, run_id: str, number: int) -> Question | None:
        row = await self._pool.fetchrow(
            "SELECT * FROM questions WHERE run_id = $1 AND number = $2", uuid.UUID(run_id), number
        )
        return _question(row) if row is not None else None

    async def of_run(self, run_id: str) -> list[Question]:
        """The run's questions, first asked first."""
        rows = await self._pool.fetch(
            "SELECT * FROM questions WHERE run_id = $1 ORDER BY number", uuid.UUID(run_id)
        )
        return [_question(row) for row in rows]

    async def settle(
        self, run_id: str, number: int, target: QuestionState, *, by: str, answer: str | None = None
    ) -> Question | None:
        """Move the question from ``awaiting`` to ``target`` (answered, with ``answer``; or expired): the moved
        row, or ``None`` if it no longer awaited or its deadline had passed (unless expiring it)."""
        row = await self._pool.fetchrow(
            """UPDATE questions
               SET state = $3, answer = $4, answered_by = $5, answered_at = now()
               WHERE run_id = $1 AND number = $2 AND state = 'awaiting'
                 AND ($3 = 'expired' OR expires_at > now())
               RETURNING *""",
            uuid.UUID(run_id),
            number,
            target.value,
            answer,
            by,
        )
        return _question(row) if row is not None else None

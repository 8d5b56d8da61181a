"""Plan reviews' rows: one per reviewed round, decided by one conditional update.

The run's driver asks for a review (``request``) and waits on its row; a person decides it through the API or
the Python API (``decide``), which needs no supervisor: the row is the meeting point, as an operation's is.
A row is one plan of one round, keyed by its hash: a yes is to that plan, whatever else the round proposes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.review import ReviewState, ReviewView


@dataclass(frozen=True)
class Review:
    """One round's plan as it was put to a person, and what became of it."""

    run_id: str
    round: int
    tenant_id: str
    subject: str
    plan: Mapping[str, Any]
    plan_hash: str
    nodes: tuple[str, ...]
    """The plan's nodes no earlier yes covered: what this review is about."""
    state: ReviewState
    expires_at: datetime
    decided_by: str | None
    decided_at: datetime | None
    note: str | None
    created_at: datetime

    @property
    def view(self) -> ReviewView:
        return ReviewView(self.state, self.plan_hash, self.subject, self.expires_at)


def _review(row: asyncpg.Record) -> Review:
    return Review(
        run_id=str(row["run_id"]),
        round=row["round"],
        tenant_id=row["tenant_id"],
        subject=row["subject"],
        plan=row["plan"],
        plan_hash=row["plan_hash"],
        nodes=tuple(row["nodes"]),
        state=ReviewState(row["state"]),
        expires_at=row["expires_at"],
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        note=row["note"],
        created_at=row["created_at"],
    )


class ReviewStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def request(
        self,
        *,
        run_id: str,
        round_number: int,
        tenant_id: str,
        subject: str,
        plan: Mapping[str, Any],
        plan_hash: str,
        nodes: Sequence[str],
        expires_at: datetime,
        actor: str,
    ) -> Review:
        """The review of this round's plan: asked for the first time, or the row as it is (a recovered run
        asks again for the plan it recorded). A review of another plan of the round still awaiting is expired
        by ``actor``: its plan was never recorded (its supervisor died first), so no yes to it may stand."""

        async def attempt() -> Review:
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.execute(
                    """UPDATE plan_reviews SET state = 'expired', decided_by = $4, decided_at = now(),
                           note = 'another plan of the round was put to review'
                       WHERE run_id = $1 AND round = $2 AND plan_hash <> $3 AND state = 'awaiting'""",
                    uuid.UUID(run_id),
                    round_number,
                    plan_hash,
                    actor,
                )
                await connection.execute(
                    """INSERT INTO plan_reviews (run_id, round, tenant_id, subject, plan, plan_hash, nodes, state,
                                                 expires_at)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, 'awaiting', $8)
                       ON CONFLICT DO NOTHING""",
                    uuid.UUID(run_id),
                    round_number,
                    tenant_id,
                    subject,
                    dict(plan),
                    plan_hash,
                    list(nodes),
                    expires_at,
                )
                row = await connection.fetchrow(
                    "SELECT * FROM plan_reviews WHERE run_id = $1 AND round = $2 AND plan_hash = $3",
                    uuid.UUID(run_id),
                    round_number,
                    plan_hash,
                )
            assert row is not None, "inserted, or there already"
            return _review(row)

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"plan review of run {run_id}")

    async def get(self, run_id: str, round_number: int, plan_hash: str) -> Review | None:
        """The review of that plan of the round."""
        row = await self._pool.fetchrow(
            "SELECT * FROM plan_reviews WHERE run_id = $1 AND round = $2 AND plan_hash = $3",
            uuid.UUID(run_id),
            round_number,
            plan_hash,
        )
        return _review(row) if row is not None else None

    async def current(self, run_id: str, round_number: int) -> Review | None:
        """The round's review a decision is about: the one awaiting, else the newest."""
        row = await self._pool.fetchrow(
            """SELECT * FROM plan_reviews WHERE run_id = $1 AND round = $2
               ORDER BY state = 'awaiting' DESC, created_at DESC LIMIT 1""",
            uuid.UUID(run_id),
            round_number,
        )
        return _review(row) if row is not None else None

    async def of_run(self, run_id: str) -> list[Review]:
        """The run's reviews, first round first."""
        rows = await self._pool.fetch(
            "SELECT * FROM plan_reviews WHERE run_id = $1 ORDER BY round, created_at", uuid.UUID(run_id)
        )
        return [_review(row) for row in rows]

    async def decide(
        self,
        run_id: str,
        round_number: int,
        plan_hash: str,
        target: ReviewState,
        *,
        actor: str,
        note: str | None = None,
    ) -> Review | None:
        """Move the review of that plan from ``awaiting`` to ``target``: the moved row, or ``None`` if it no
        longer awaited (decided or expired meanwhile) or its deadline had passed (unless expiring it)."""
        row = await self._pool.fetchrow(
            """UPDATE plan_reviews
               SET state = $4, decided_by = $5, decided_at = now(), note = $6
               WHERE run_id = $1 AND round = $2 AND plan_hash = $3 AND state = 'awaiting'
                 AND ($4 = 'expired' OR expires_at > now())
               RETURNING *""",
            uuid.UUID(run_id),
            round_number,
            plan_hash,
            target.value,
            actor,
            note,
        )
        return _review(row) if row is not None else None

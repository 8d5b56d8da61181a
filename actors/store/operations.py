"""The operation ledger's rows: one per write a run wants to make, moved only by conditional updates.

Every change names the states it may start from (``dag.operations.sources_of``) and happens in one statement
with its history row, so two callers can never both move an operation: the one whose UPDATE matched wins, the
other reads the row as it now is. The run's owner writes here without its lease, on purpose: a caller that
executed a write records what happened even if its run was taken over meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.contracts import Recording, Risk
from dag.events import NodeError
from dag.operations import OperationState, OperationView, sources_of
from dag.writes import Approval


@dataclass(frozen=True)
class Operation:
    """One row of the ledger."""

    operation_id: str
    run_id: str
    node_id: str
    tenant_id: str
    subject: str
    resource: Mapping[str, Any]
    tool: str
    description: str
    risk: Risk
    approval: Approval
    recording: Recording
    args: Mapping[str, Any]
    args_hash: str
    state: OperationState
    attempts: int
    expires_at: datetime | None
    executing_since: datetime | None
    output: Any
    error: NodeError | None
    created_at: datetime
    updated_at: datetime

    @property
    def view(self) -> OperationView:
        return OperationView(
            operation_id=self.operation_id,
            state=self.state,
            args_hash=self.args_hash,
            risk=self.risk,
            subject=self.subject,
            expires_at=self.expires_at,
        )


@dataclass(frozen=True)
class Transition:
    """One line of an operation's history: who moved it, from where to where, when, and why."""

    from_state: OperationState | None
    to_state: OperationState
    actor: str
    note: str | None
    at: datetime


def _operation(row: asyncpg.Record) -> Operation:
    error = row["error"]
    return Operation(
        operation_id=str(row["operation_id"]),
        run_id=str(row["run_id"]),
        node_id=row["node_id"],
        tenant_id=row["tenant_id"],
        subject=row["subject"],
        resource=row["resource"],
        tool=row["tool"],
        description=row["description"],
        risk=Risk(row["risk"]),
        approval=Approval(row["approval"]),
        recording=Recording(row["recording"]),
        args=row["args"],
        args_hash=row["args_hash"],
        state=OperationState(row["state"]),
        attempts=row["attempts"],
        expires_at=row["expires_at"],
        executing_since=row["executing_since"],
        output=row["output"],
        error=NodeError.model_validate(error) if error is not None else None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


_MOVE = """
WITH old AS (
    SELECT operation_id, state AS from_state FROM operations
    WHERE operation_id = $1 AND state = ANY($3::text[]) AND ($8::text IS NULL OR args_hash = $8)
    FOR UPDATE
), moved AS (
    UPDATE operations AS o
    SET state = $2, updated_at = now(),
        attempts = o.attempts + CASE WHEN $2 = 'executing' THEN 1 ELSE 0 END,
        executing_since = CASE WHEN $2 = 'executing' THEN now() ELSE o.executing_since END,
        expires_at = COALESCE($4, o.expires_at),
        output = CASE WHEN $5::boolean THEN $6::jsonb ELSE o.output END,
        error = CASE WHEN $2 = 'succeeded' THEN NULL ELSE COALESCE($7::jsonb, o.error) END
    FROM old WHERE o.operation_id = old.operation_id
    RETURNING o.*, old.from_state
), history AS (
    INSERT INTO operation_transitions (operation_id, from_state, to_state, actor, note)
    SELECT operation_id, from_state, $2, $9, $10 FROM moved
)
SELECT * FROM moved
"""
"""One conditional move and its history row, in one statement. Under READ COMMITTED a concurrent mover
waits on the row lock and then finds the row no longer in a source state: exactly one of them moves it."""


class OperationStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def propose(
        self,
        *,
        operation_id: str,
        run_id: str,
        node_id: str,
        tenant_id: str,
        subject: str,
        resource: Mapping[str, Any],
        tool: str,
        description: str,
        risk: Risk,
        approval: Approval,
        recording: Recording,
        args: Mapping[str, Any],
        args_hash: str,
        actor: str,
    ) -> Operation:
        """The operation's row: inserted as ``proposed`` the first time the write is proposed, else the row
        as it is (whatever its state: the same write proposed again is the same operation)."""

        async def attempt() -> Operation:
            async with self._pool.acquire() as connection, connection.transaction():
                row = await connection.fetchrow(
                    """INSERT INTO operations (operation_id, run_id, node_id, tenant_id, subject, resource, tool,
                                              description, risk, approval, recording, args, args_hash, state)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, 'proposed')
                       ON CONFLICT DO NOTHING
                       RETURNING *""",
                    uuid.UUID(operation_id),
                    uuid.UUID(run_id),
                    node_id,
                    tenant_id,
                    subject,
                    dict(resource),
                    tool,
                    description,
                    risk.value,
                    approval.value,
                    recording.value,
                    dict(args),
                    args_hash,
                )
                if row is not None:
                    await connection.execute(
                        """INSERT INTO operation_transitions (operation_id, from_state, to_state, actor)
                           VALUES ($1, NULL, 'proposed', $2)""",
                        uuid.UUID(operation_id),
                        actor,
                    )
                    return _operation(row)
                existing = await connection.fetchrow(
                    "SELECT * FROM operations WHERE operation_id = $1", uuid.UUID(operation_id)
                )
            assert existing is not None, "a conflicting insert implies the row exists"
            return _operation(existing)

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"operation {operation_id}")

    async def move(
        self,
        operation_id: str,
        target: OperationState,
        *,
        actor: str,
        note: str | None = None,
        sources: Collection[OperationState] | None = None,
        quoted_hash: str | None = None,
        expires_at: datetime | None = None,
        output: Any = None,
        has_output: bool = False,
        error: NodeError | None = None,
    ) -> Operation | None:
        """Move the operation to ``target`` if it is in one of ``sources`` (every legal source by default) and,
        with ``quoted_hash``, its arguments still hash to it; the moved row, or ``None`` if it was not there
        to move (another caller moved it first, or the hash is another)."""
        legal = sources_of(target)  # the transition table decides; ``sources`` only narrows it
        allowed = sorted(
            state.value for state in (legal & frozenset(sources) if sources is not None else legal)
        )

        async def attempt() -> Operation | None:
            async with self._pool.acquire() as connection:
                row = await connection.fetchrow(
                    _MOVE,
                    uuid.UUID(operation_id),
                    target.value,
                    allowed,
                    expires_at,
                    has_output,
                    output if has_output else None,
                    error.model_dump(mode="json") if error is not None else None,
                    quoted_hash,
                    actor,
                    note,
                )
            return _operation(row) if row is not None else None

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"operation {operation_id} → {target}")

    async def get(self, operation_id: str) -> Operation | None:
        row = await self._pool.fetchrow(
            "SELECT * FROM operations WHERE operation_id = $1", _uuid(operation_id)
        )
        return _operation(row) if row is not None else None

    async def of_run(self, run_id: str) -> list[Operation]:
        rows = await self._pool.fetch(
            "SELECT * FROM operations WHERE run_id = $1 ORDER BY created_at, operation_id", uuid.UUID(run_id)
        )
        return [_operation(row) for row in rows]

    async def listed_for(self, run_id: str) -> list[Operation]:
        """The run's operations and those it took over by id from the runs it continues (its ``run_continued``
        event names them), oldest first: each names the run that proposed it."""
        rows = await self._pool.fetch(
            """SELECT * FROM operations WHERE run_id = $1 OR operation_id IN (
                   SELECT (carried->>'operation_id')::uuid
                   FROM run_events, jsonb_array_elements(data->'operations') AS carried
                   WHERE run_id = $1 AND kind = 'run_continued')
               ORDER BY created_at, operation_id""",
            uuid.UUID(run_id),
        )
        return [_operation(row) for row in rows]

    async def history(self, operation_ids: Collection[str]) -> dict[str, list[Transition]]:
        rows = await self._pool.fetch(
            """SELECT operation_id, from_state, to_state, actor, note, at FROM operation_transitions
               WHERE operation_id = ANY($1::uuid[]) ORDER BY operation_id, seq""",
            [uuid.UUID(op) for op in operation_ids],
        )
        found: dict[str, list[Transition]] = {op: [] for op in operation_ids}
        for row in rows:
            found[str(row["operation_id"])].append(
                Transition(
                    from_state=OperationState(row["from_state"]) if row["from_state"] else None,
                    to_state=OperationState(row["to_state"]),
                    actor=row["actor"],
                    note=row["note"],
                    at=row["at"],
                )
            )
        return found

    async def unattended(self, limit: int = 100) -> list[Operation]:
        """Operations out or unknown whose run has ended: no round drives them any more (a run cancelled, or
        stopped, with a write out), so the supervisors' sweep reconciles them."""
        rows = await self._pool.fetch(
            """SELECT o.* FROM operations o JOIN runs r USING (run_id)
               WHERE o.state IN ('executing', 'unknown') AND r.finished_at IS NOT NULL
               ORDER BY o.updated_at LIMIT $1""",
            limit,
        )
        return [_operation(row) for row in rows]

    async def unknown(self) -> tuple[int, float]:
        """How many operations are unknown, and for how long the oldest has been (seconds; 0 if none is)."""
        row = await self._pool.fetchrow(
            """SELECT count(*) AS count,
                      COALESCE(EXTRACT(EPOCH FROM now() - min(updated_at)), 0)::float8 AS oldest
               FROM operations WHERE state = 'unknown'"""
        )
        assert row is not None
        return int(row["count"]), float(row["oldest"])


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None

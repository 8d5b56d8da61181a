"""The operation ledger's rows: one per business intent a run wants to act on, shared by every run that proposes
it while it is joinable, and moved only by conditional updates.

Every change names the states it may start from (``dag.operations.sources_of``) and happens in one statement
with its history row, so two callers can never both move an operation: the one whose UPDATE matched wins, the
other reads the row as it now is. The run's owner writes here without its lease, on purpose: a caller that
executed a write records what happened even if its run was taken over meanwhile.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any

import asyncpg

from actors.store._operation_rows import (
    Operation,
    Sharer,
    Transition,
    intent_lock,
    move_row,
    operation_of,
)
from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.contracts import Recording, Risk
from dag.events import NodeError
from dag.operations import OperationState, joinable, overdue, sources_of
from dag.writes import Approval, Intent

__all__ = ["Operation", "OperationStore", "Sharer", "Transition"]

_STILL_SHARED = """SELECT EXISTS (SELECT 1 FROM operation_runs s JOIN runs r USING (run_id)
                          WHERE s.operation_id = $1 AND s.left_at IS NULL AND r.finished_at IS NULL)"""
"""Whether a live run still shares operation ``$1``: one that has not finished, nor left it as it stopped."""


class OperationStore:
    """The ledger: operations proposed (or joined), moved, listed, and swept."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def propose(
        self,
        *,
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
        intent: Intent,
        intent_hash: str,
        actor: str,
        carried: str | None = None,
    ) -> Operation:
        """The operation of this intent for ``run_id``: the one the run already shares (a second node, a
        recovery, a retried proposal); else ``carried``, the operation a continuation takes over; else the
        intent's latest operation if it is joinable (``dag.operations.joinable``), which the run joins; else
        a new one, the intent's next generation, inserted as ``proposed``.

        Under a transaction-scoped advisory lock on the intent: two runs proposing it at once converge on one
        row (the unique index on the intent and its generation says so too), and a stopping run's expiry
        (``expire_unshared``) never races a join."""
        key = intent_lock(tenant_id, tool, intent_hash)

        async def attempt() -> Operation:
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", key)
                shared = await connection.fetchrow(
                    """SELECT o.* FROM operation_runs r JOIN operations o USING (operation_id)
                       WHERE r.run_id = $1 AND o.tenant_id = $2 AND o.tool = $3 AND o.intent_hash = $4
                       ORDER BY o.generation DESC LIMIT 1""",
                    uuid.UUID(run_id),
                    tenant_id,
                    tool,
                    intent_hash,
                )
                if shared is not None:
                    return operation_of(shared)
                found = None
                if carried is not None:
                    found = await connection.fetchrow(
                        "SELECT * FROM operations WHERE operation_id = $1", uuid.UUID(carried)
                    )
                latest = await connection.fetchrow(
                    """SELECT *, now() AS at FROM operations WHERE tenant_id = $1 AND tool = $2 AND intent_hash = $3
                       ORDER BY generation DESC LIMIT 1""",
                    tenant_id,
                    tool,
                    intent_hash,
                )
                if found is None and latest is not None:
                    state = OperationState(latest["state"])
                    if overdue(state, latest["expires_at"], latest["at"]):
                        # Nobody waits on it any more, or its waiter has not looked yet: too late either way.
                        expired = await move_row(
                            connection,
                            str(latest["operation_id"]),
                            OperationState.EXPIRED,
                            [state.value],
                            actor="deadline",
                            note="no decision before the operation's deadline",
                        )
                        # None: a decision landed at that very moment, and stands.
                        state = expired.state if expired is not None else await _state_of(connection, latest)
                    if joinable(state, latest["updated_at"], intent, latest["at"]):
                        found = latest
                if found is None:
                    generation = 1 if latest is None else latest["generation"] + 1
                    found = await connection.fetchrow(
                        """INSERT INTO operations (operation_id, run_id, node_id, tenant_id, subject, resource,
                                                  tool, description, risk, approval, recording, args, args_hash,
                                                  intent_hash, generation, state)
                           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, 'proposed')
                           RETURNING *""",
                        uuid.uuid4(),  # a key of this row's own: never another ledger's
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
                        intent_hash,
                        generation,
                    )
                    assert found is not None
                    await connection.execute(
                        """INSERT INTO operation_transitions (operation_id, from_state, to_state, actor)
                           VALUES ($1, NULL, 'proposed', $2)""",
                        found["operation_id"],
                        actor,
                    )
                await connection.execute(
                    """INSERT INTO operation_runs (operation_id, run_id, node_id, subject) VALUES ($1, $2, $3, $4)
                       ON CONFLICT DO NOTHING""",
                    found["operation_id"],
                    uuid.UUID(run_id),
                    node_id,
                    subject,
                )
            return operation_of(found)

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"the operation of {tool} in run {run_id}")

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
                return await move_row(
                    connection,
                    operation_id,
                    target,
                    allowed,
                    actor=actor,
                    note=note,
                    quoted_hash=quoted_hash,
                    expires_at=expires_at,
                    output=output,
                    has_output=has_output,
                    error=error,
                )

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"operation {operation_id} → {target}")

    async def record_task(self, operation_id: str, task: Mapping[str, Any]) -> bool:
        """Record the task an executing operation's call runs as (or its new status); ``False`` if the operation
        no longer executes (its outcome was recorded meanwhile)."""

        async def attempt() -> bool:
            status = await self._pool.execute(
                "UPDATE operations SET task = $2 WHERE operation_id = $1 AND state = 'executing'",
                uuid.UUID(operation_id),
                dict(task),
            )
            return bool(status == "UPDATE 1")

        return await retrying(attempt, window_s=RUN_WINDOW_S, what=f"operation {operation_id}'s task")

    async def expire_unshared(self, run_id: str, *, actor: str, note: str) -> list[str]:
        """Expire the operations ``run_id`` shares that have not begun executing — awaiting a person, or
        approved and not yet claimed — unless another live run shares them: its run stopped, and an operation
        nobody else waits on must not execute later. One another run still waits on stays as it is, for that
        run (and is expired when the last of them stops). The ids expired.

        Under the intent's advisory lock, as a proposal is: a run joining the operation at that moment either
        joined first (and is a live sharer) or finds it expired (and proposes the intent anew)."""
        unexecuted = frozenset({OperationState.AWAITING_APPROVAL, OperationState.APPROVED})
        allowed = sorted(state.value for state in sources_of(OperationState.EXPIRED) & unexecuted)
        expired = []
        for row in await self.of_run(run_id):
            if row.state not in unexecuted:
                continue

            async def attempt(row: Operation = row) -> bool:
                async with self._pool.acquire() as connection, connection.transaction():
                    await connection.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                        intent_lock(row.tenant_id, row.tool, row.intent_hash),
                    )
                    # The run leaves it first: of two sharing runs stopping at once, the second sees the first
                    # gone, and expires it.
                    await connection.execute(
                        "UPDATE operation_runs SET left_at = now() WHERE operation_id = $1 AND run_id = $2",
                        uuid.UUID(row.operation_id),
                        uuid.UUID(run_id),
                    )
                    if await connection.fetchval(_STILL_SHARED, uuid.UUID(row.operation_id)):
                        return False
                    moved = await move_row(
                        connection, row.operation_id, OperationState.EXPIRED, allowed, actor=actor, note=note
                    )
                    return moved is not None

            if await retrying(attempt, window_s=RUN_WINDOW_S, what=f"operation {row.operation_id} → expired"):
                expired.append(row.operation_id)
        return expired

    async def get(self, operation_id: str) -> Operation | None:
        row = await self._pool.fetchrow(
            "SELECT * FROM operations WHERE operation_id = $1", _uuid(operation_id)
        )
        return operation_of(row) if row is not None else None

    async def of_run(self, run_id: str) -> list[Operation]:
        """The operations the run shares: those it proposed first and those it joined, oldest first."""
        rows = await self._pool.fetch(
            """SELECT o.* FROM operation_runs r JOIN operations o USING (operation_id) WHERE r.run_id = $1
               ORDER BY o.created_at, o.operation_id""",
            uuid.UUID(run_id),
        )
        return [operation_of(row) for row in rows]

    async def listed_for(self, run_id: str) -> list[Operation]:
        """The operations the run shares and those it took over by id from the runs it continues (its
        ``run_continued`` event names them), oldest first: each names the run that proposed it."""
        rows = await self._pool.fetch(
            """SELECT * FROM operations
               WHERE operation_id IN (SELECT operation_id FROM operation_runs WHERE run_id = $1)
                  OR operation_id IN (
                   SELECT (carried->>'operation_id')::uuid
                   FROM run_events, jsonb_array_elements(data->'operations') AS carried
                   WHERE run_id = $1 AND kind = 'run_continued')
               ORDER BY created_at, operation_id""",
            uuid.UUID(run_id),
        )
        return [operation_of(row) for row in rows]

    async def sharers(self, operation_ids: Collection[str]) -> dict[str, list[Sharer]]:
        """The runs that share each operation, in the order they proposed or joined it (the first proposed)."""
        rows = await self._pool.fetch(
            """SELECT operation_id, run_id, node_id, subject, joined_at FROM operation_runs
               WHERE operation_id = ANY($1::uuid[]) ORDER BY operation_id, joined_at, run_id""",
            [uuid.UUID(op) for op in operation_ids],
        )
        found: dict[str, list[Sharer]] = {op: [] for op in operation_ids}
        for row in rows:
            found[str(row["operation_id"])].append(
                Sharer(
                    run_id=str(row["run_id"]),
                    node_id=row["node_id"],
                    subject=row["subject"],
                    joined_at=row["joined_at"],
                )
            )
        return found

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
        """Operations out or unknown that no live run shares: no round drives them any more (their runs were
        cancelled, or stopped, with a write out), so the supervisors' sweep reconciles them."""
        rows = await self._pool.fetch(
            """SELECT o.* FROM operations o
               WHERE o.state IN ('executing', 'unknown') AND NOT EXISTS (
                   SELECT 1 FROM operation_runs s JOIN runs r USING (run_id)
                   WHERE s.operation_id = o.operation_id AND s.left_at IS NULL AND r.finished_at IS NULL)
               ORDER BY o.updated_at LIMIT $1""",
            limit,
        )
        return [operation_of(row) for row in rows]

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


async def _state_of(connection: asyncpg.Connection, row: asyncpg.Record) -> OperationState:
    return OperationState(
        await connection.fetchval("SELECT state FROM operations WHERE operation_id = $1", row["operation_id"])
    )

"""The operation ledger's rows as Python values, and the one statement that moves a row (for
``actors.store.operations``, which alone imports this module)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from dag.contracts import Recording, Risk
from dag.events import NodeError
from dag.operations import OperationState, OperationView
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
    intent_hash: str
    """The hash of the arguments that name its intent (``dag.operations.intent_hash``)."""
    generation: int
    """Which operation of its intent it is: 1, then one more each time the intent is proposed anew."""
    state: OperationState
    attempts: int
    expires_at: datetime | None
    executing_since: datetime | None
    output: Any
    error: NodeError | None
    created_at: datetime
    updated_at: datetime
    task: Mapping[str, Any] | None = None
    """The MCP task its execution runs as (``TaskHandle.json()``), recorded before anyone waits on it."""

    def view(self, sharers: Collection[Sharer]) -> OperationView:
        """What a decision about it is weighed on, among the runs that share it."""
        return OperationView(
            operation_id=self.operation_id,
            state=self.state,
            args_hash=self.args_hash,
            risk=self.risk,
            subjects=frozenset({self.subject, *(sharer.subject for sharer in sharers)}),
            expires_at=self.expires_at,
        )


@dataclass(frozen=True)
class Sharer:
    """A run that shares an operation: it proposed the intent first, or joined it."""

    run_id: str
    node_id: str
    """The node of that run that proposed it (its first, if several did)."""
    subject: str
    """The run's principal."""
    joined_at: datetime


@dataclass(frozen=True)
class Transition:
    """One line of an operation's history: who moved it, from where to where, when, and why."""

    from_state: OperationState | None
    to_state: OperationState
    actor: str
    note: str | None
    at: datetime


def operation_of(row: asyncpg.Record) -> Operation:
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
        intent_hash=row["intent_hash"],
        generation=row["generation"],
        state=OperationState(row["state"]),
        attempts=row["attempts"],
        expires_at=row["expires_at"],
        executing_since=row["executing_since"],
        output=row["output"],
        error=NodeError.model_validate(error) if error is not None else None,
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        task=row["task"],
    )


MOVE = """
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


async def move_row(
    connection: asyncpg.Connection,
    operation_id: str,
    target: OperationState,
    allowed: list[str],
    *,
    actor: str,
    note: str | None,
    quoted_hash: str | None = None,
    expires_at: datetime | None = None,
    output: Any = None,
    has_output: bool = False,
    error: NodeError | None = None,
) -> Operation | None:
    """``MOVE`` on ``connection``: the moved row, or ``None``."""
    row = await connection.fetchrow(
        MOVE,
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
    return operation_of(row) if row is not None else None


def intent_lock(tenant_id: str, tool: str, intent_hash: str) -> str:
    """What a proposal of the intent locks (hashed to an advisory lock's key): its tenant, tool and hash."""
    return f"{tenant_id}\n{tool}\n{intent_hash}"

"""The run store: run creation with idempotency keys, event appends, and the reads the API serves."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

import asyncpg

from actors.store.ownership import LeaseLost
from actors.store.resilience import REQUEST_WINDOW_S, RUN_WINDOW_S, Line, retrying
from dag.events import (
    NodeDenied,
    NodeDispatched,
    NodeFailed,
    NodeRetryScheduled,
    NodeSucceeded,
    PlanAccepted,
    PlanReviewRequested,
    QuestionAsked,
    RunContinued,
    RunCreated,
    RunEvent,
    RunFinished,
    RunParked,
    RunWaiting,
    event_from_json,
    event_node_id,
    event_to_json,
    events_to_json_text,
)
from dag.fingerprint import sha256_hex
from dag.policy import Principal
from dag.run_state import RunState
from dag.states import NodeStatus

MAX_SEQ = 2**31 - 1
"""The largest event sequence number: ``run_events.seq`` is a PostgreSQL ``integer``. A run records a few
events per node and has at most 10,000 nodes, so a cursor past this names nothing: the API refuses it as input
rather than widening the largest table's key."""

_T = TypeVar("_T")


SUMMARY_COLUMNS = """run_id, tenant_id, resource, case_id, goal, planner, status, stop_reason, detail,
    created_at, updated_at, finished_at, last_seq, pruned_at, tools, continues, owner,
    (SELECT later.run_id FROM runs later WHERE later.continues = runs.run_id) AS continued_by,
    parent_run_id, parent_node_id, depth,
    ARRAY(SELECT child.run_id FROM runs child WHERE child.parent_run_id = runs.run_id
          ORDER BY child.created_at, child.run_id) AS children"""
"""A run's row as a page of runs reads it: all but its plan and result, the run that continues it, and its
agent runs: its parent, and its children."""
RUN_COLUMNS = f"{SUMMARY_COLUMNS}, result, plan"
"""A run's row as ``RunStore.run_row`` reads it."""

PARKED_FOREVER = datetime(9999, 12, 31, tzinfo=UTC)
"""``runs.parked_until`` of a run parked on waits none of which has a deadline: only a decision wakes it."""


class Creation(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class StoredEvent:
    seq: int
    event: RunEvent
    recorded_at: datetime


_AS_JSON_TEXT = frozenset({"p_events"})
"""Arguments passed as JSON text already encoded, cast to ``jsonb`` by the statement: the pool's ``jsonb``
codec would encode a string as a JSON string."""


@functools.cache
def _append_statement(names: tuple[str, ...]) -> str:
    """``SELECT raydag_append(p_run_id => $1, …)`` for arguments passed in the order of ``names``."""
    arguments = (
        f"{name} => ${index}::text::jsonb" if name in _AS_JSON_TEXT else f"{name} => ${index}"
        for index, name in enumerate(names, 1)
    )
    return f"SELECT raydag_append({', '.join(arguments)})"


class RunStore:
    """All run persistence. Every write for one transition commits in one transaction.

    ``owner`` names the supervisor whose appends this store makes: an append commits only while the run
    is still that owner's, so two supervisors can never both record (and then dispatch) for one run.
    """

    def __init__(self, pool: asyncpg.Pool, *, owner: str = "", lease_s: float = 15.0) -> None:
        self._pool = pool
        # Requests' statements take turns at the pool; a run's transitions do not wait behind them.
        self._line = Line(pool.get_max_size())
        self.owner = owner
        self.lease_s = lease_s

    @property
    def line(self) -> Line:
        """Where requests' statements take turns at the pool (a listing's reads take theirs here too)."""
        return self._line

    async def ping(self) -> None:
        """One round trip to the database, without retries: raises if it does not answer."""
        await self._pool.fetchval("SELECT 1")

    async def create_run(
        self,
        created: RunCreated,
        *,
        idempotency_key: str | None,
        request_hash: str,
        tools: Collection[str] | None = None,
        continued: RunContinued | None = None,
    ) -> tuple[Creation, str]:
        """Insert the run and its first event, or find the run an idempotency key already names.

        ``tools`` are those the run is offered: only a supervisor serving all of them adopts it (``None``:
        any supervisor). ``continued``: the run continues an earlier one; it is the run's second event, and
        the earlier run has at most one continuation (a second is the first, replayed or in conflict).

        Concurrent requests with one key serialize on the unique index: exactly one inserts, the others
        wait for its commit and then read it. Safe to retry: a repeated insert finds its own run.
        """

        first: list[RunEvent] = [created] if continued is None else [created, continued]
        parent = created.parent

        async def attempt() -> tuple[Creation, str]:
            async with self._pool.acquire() as connection, connection.transaction():
                run_id = await connection.fetchval(
                    """INSERT INTO runs (run_id, tenant_id, subject, scopes, case_id, goal, planner, status,
                                         idempotency_key, request_hash, last_seq, created_at, updated_at,
                                         owner, lease_expires_at, resource, tools, continues,
                                         parent_run_id, parent_node_id, depth)
                       VALUES ($1, $2, $3, $10, $4, $5, $6, 'pending', $7, $8, $16, $9, $9,
                               $11, now() + make_interval(secs => $12), $13, $14, $15, $17, $18, $19)
                       ON CONFLICT DO NOTHING
                       RETURNING run_id""",
                    uuid.UUID(created.run_id),
                    created.tenant_id,
                    created.subject,
                    created.resource.get("case_id"),
                    created.goal,
                    created.planner,
                    idempotency_key,
                    request_hash,
                    created.at,
                    list(created.scopes),
                    self.owner,
                    self.lease_s,
                    dict(created.resource),
                    sorted(tools) if tools is not None else None,
                    uuid.UUID(continued.continues) if continued is not None else None,
                    len(first),
                    uuid.UUID(parent.run_id) if parent is not None else None,
                    parent.node_id if parent is not None else None,
                    parent.depth if parent is not None else 0,
                )
                if run_id is not None:
                    await connection.executemany(
                        "INSERT INTO run_events (run_id, seq, kind, node_id, data) VALUES ($1, $2, $3, NULL, $4)",
                        [
                            (run_id, seq, event.kind, event_to_json(event))
                            for seq, event in enumerate(first, 1)
                        ],
                    )
                    return Creation.CREATED, str(run_id)
                existing = await connection.fetchrow(
                    """SELECT run_id, request_hash FROM runs
                       WHERE run_id = $3 OR (tenant_id = $1 AND idempotency_key = $2) OR continues = $4""",
                    created.tenant_id,
                    idempotency_key,
                    uuid.UUID(created.run_id),
                    uuid.UUID(continued.continues) if continued is not None else None,
                )
            assert existing is not None, "a conflicting insert implies the row exists"
            if str(existing["run_id"]) == created.run_id:
                return Creation.CREATED, created.run_id  # our own insert, committed before a lost reply
            outcome = Creation.REPLAYED if existing["request_hash"] == request_hash else Creation.CONFLICT
            return outcome, str(existing["run_id"])

        if parent is not None:  # a step of its parent run, which rides out an outage as its records do
            return await retrying(attempt, window_s=RUN_WINDOW_S, what="child run creation")
        return await retrying(attempt, window_s=REQUEST_WINDOW_S, line=self._line, what="run creation")

    async def append(self, state: RunState, first_seq: int, events: Sequence[RunEvent]) -> None:
        """Append ``events`` as ``first_seq…``, update the summary to ``state``, the tool ledger, and — for a
        terminal transition — the audit log and the outbox: one call of ``raydag_append`` (migration 0008),
        one round trip, atomic as one statement.

        Safe to retry after a dropped connection: an append that did commit is recognised, not repeated.
        Raises ``LeaseLost`` if the run is no longer this store's owner's.
        """
        run_id = uuid.UUID(state.run_id)
        plan = next(
            (event.plan for event in events if isinstance(event, PlanAccepted) and event.round == 1), None
        )
        opened, closed = _ledger_rows(state, events)
        finished = next((event for event in events if isinstance(event, RunFinished)), None)
        audit, outbox = _terminal_records(run_id, state, finished) if finished is not None else (None, None)
        told = _waits_told(run_id, state, first_seq, events) + ([outbox] if outbox is not None else [])
        parked = next((event for event in events if isinstance(event, RunParked)), None)
        # By name: the function's 22 parameters are matched to its signature, not to their order.
        arguments = {
            "p_run_id": run_id,
            "p_owner": self.owner,
            "p_first_seq": first_seq,
            "p_kinds": [event.kind for event in events],
            "p_node_ids": [event_node_id(event) for event in events],
            "p_events": events_to_json_text(events),
            "p_status": state.status.value,
            "p_stop_reason": state.stop_reason.value if state.stop_reason else None,
            "p_detail": state.detail,
            "p_result": dict(state.result) if state.result is not None else None,
            "p_plan": plan,
            "p_updated_at": datetime.now(UTC),
            "p_finished_at": state.finished_at,
            "p_lease_s": self.lease_s,
            "p_running": NodeStatus.RUNNING.value,
            "p_opened": opened,
            "p_closed": closed,
            "p_cancelled": NodeStatus.CANCELLED.value,
            "p_cancelled_at": finished.at if finished is not None else None,
            "p_audit": audit,
            "p_outbox": told or None,
            "p_parked_until": (parked.wake_at or PARKED_FOREVER) if parked is not None else None,
        }
        statement = _append_statement(tuple(arguments))

        async def attempt() -> str:
            outcome: str = await self._pool.fetchval(statement, *arguments.values())
            return outcome

        outcome = await retrying(attempt, window_s=RUN_WINDOW_S, what=f"append to run {state.run_id}")
        if outcome in ("appended", "committed"):  # committed: it did, before its acknowledgement was lost
            return
        if outcome.startswith("seq:"):
            raise LeaseLost(f"run {state.run_id} is at seq {outcome[4:]}, expected {first_seq - 1}")
        owner = outcome.removeprefix("owner:") if outcome.startswith("owner:") else None
        raise LeaseLost(f"run {state.run_id} is owned by {owner!r}, not {self.owner!r}")

    async def run_status(self, run_id: str, *, window_s: float = REQUEST_WINDOW_S) -> str | None:
        """The run's status; ``None``: no such run. ``window_s``: how long an outage is ridden out (a run's own
        step passes ``RUN_WINDOW_S``; a request keeps the default)."""
        try:
            key = uuid.UUID(run_id)
        except ValueError:
            return None

        async def query() -> str | None:
            status: str | None = await self._pool.fetchval("SELECT status FROM runs WHERE run_id = $1", key)
            return status

        return await self._read(query, window_s, "run status")

    async def run_standing(
        self, run_id: str, *, window_s: float = REQUEST_WINDOW_S
    ) -> tuple[str, bool] | None:
        """The run's status, and whether it is parked (waiting for people, driven by nobody); ``None``: no such
        run. ``window_s`` as for ``run_status``."""
        try:
            key = uuid.UUID(run_id)
        except ValueError:
            return None

        async def query() -> tuple[str, bool] | None:
            found = await self._pool.fetchrow(
                "SELECT status, parked_until IS NOT NULL AS parked FROM runs WHERE run_id = $1", key
            )
            return None if found is None else (str(found["status"]), bool(found["parked"]))

        return await self._read(query, window_s, "run standing")

    async def _read(self, query: Callable[[], Awaitable[_T]], window_s: float, what: str) -> _T:
        """``query`` retried within ``window_s``: a request's in the request line, a run's step outside it."""
        if window_s > REQUEST_WINDOW_S:
            return await retrying(query, window_s=window_s, what=what)
        return await retrying(query, window_s=window_s, line=self._line, what=what)

    async def run_row(self, principal: Principal, run_id: str) -> dict[str, Any] | None:
        """The run's summary if ``principal`` may read it: same tenant, and at least the scopes the run held.

        ``None`` for an unknown run, another tenant's run, or one the reader lacks scopes for: indistinguishable.
        """
        try:
            key = uuid.UUID(run_id)
        except ValueError:
            return None
        row = await retrying(
            lambda: self._pool.fetchrow(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1 AND tenant_id = $2 AND scopes <@ $3::text[]",
                key,
                principal.tenant_id,
                sorted(principal.scopes),
            ),
            window_s=REQUEST_WINDOW_S,
            line=self._line,
            what="run read",
        )
        return dict(row) if row is not None else None

    async def events(
        self, run_id: str, after: int = 0, *, window_s: float = REQUEST_WINDOW_S
    ) -> list[StoredEvent]:
        """The run's events with ``seq > after``, in order (``after=0``: all of them); ``window_s`` as for
        ``run_status``."""
        rows = await self._read(
            lambda: self._pool.fetch(
                "SELECT seq, data, recorded_at FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq",
                uuid.UUID(run_id),
                after,
            ),
            window_s,
            "event read",
        )
        return [StoredEvent(row["seq"], event_from_json(row["data"]), row["recorded_at"]) for row in rows]

    async def ledger(self, run_id: str) -> list[dict[str, Any]]:
        rows = await retrying(
            lambda: self._pool.fetch(
                """SELECT node_id, attempt, tool, fingerprint, args_hash, decision, status, error,
                          dispatched_at, started_at, finished_at
                   FROM tool_ledger WHERE run_id = $1 ORDER BY dispatched_at, node_id, attempt""",
                uuid.UUID(run_id),
            ),
            window_s=REQUEST_WINDOW_S,
            line=self._line,
            what="ledger read",
        )
        return [dict(row) for row in rows]


def _iso(moment: datetime | None) -> str | None:
    """A timestamp as a JSON row carries it to PostgreSQL (``timestamptz`` reads the offset)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        raise ValueError(f"a naive timestamp cannot be recorded: {moment!r}")
    return moment.isoformat()


def _ledger_rows(
    state: RunState, events: Sequence[RunEvent]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ledger rows an append opens (a dispatch or a refusal) and closes (an attempt's outcome): one row
    per attempt."""
    opened: list[dict[str, Any]] = []
    closed: list[dict[str, Any]] = []
    for event in events:
        match event:
            case NodeDispatched() | NodeDenied():
                dispatched = isinstance(event, NodeDispatched)
                opened.append(
                    {
                        "node_id": event.node_id,
                        "attempt": event.attempt if isinstance(event, NodeDispatched) else 1,
                        "tool": event.tool,
                        "fingerprint": event.fingerprint,
                        "args_hash": sha256_hex(event.args),
                        "decision": event.decision.model_dump(mode="json"),
                        "status": (NodeStatus.RUNNING if dispatched else NodeStatus.DENIED).value,
                        "dispatched_at": _iso(event.at),
                    }
                )
            case NodeSucceeded() | NodeFailed() | NodeRetryScheduled():
                succeeded = isinstance(event, NodeSucceeded)
                error = None if isinstance(event, NodeSucceeded) else event.error.model_dump(mode="json")
                closed.append(
                    {
                        "node_id": event.node_id,
                        "attempt": (
                            event.attempt
                            if isinstance(event, NodeRetryScheduled)
                            else state.nodes[event.node_id].attempts
                        ),
                        "status": (NodeStatus.SUCCEEDED if succeeded else NodeStatus.FAILED).value,
                        "error": error,
                        "started_at": _iso(event.started_at),
                        "finished_at": _iso(event.finished_at),
                    }
                )
            case _:
                pass
    return opened, closed


def _waits_told(
    run_id: uuid.UUID, state: RunState, first_seq: int, events: Sequence[RunEvent]
) -> list[dict[str, Any]]:
    """The outbox's ``run.waiting`` events of an append: one for each wait for people it starts (a write
    awaiting approval or a resolution, a plan review, a question), naming what the run waits on. Their ids are
    stable: a retried append writes them once."""
    told = []
    waits: list[dict[str, Any]]
    for seq, event in enumerate(events, first_seq):
        match event:
            case RunWaiting(operation_ids=operations) if operations:  # (none: its child runs' tell theirs)
                waits = [{"kind": "operation", "operation_id": op} for op in operations]
            case PlanReviewRequested():
                waits = [
                    {
                        "kind": "review",
                        "round": event.round,
                        "plan_hash": event.plan_hash,
                        "expires_at": _iso(event.expires_at),
                    }
                ]
            case QuestionAsked():
                waits = [{"kind": "question", "number": event.number, "expires_at": _iso(event.expires_at)}]
            case _:
                continue
        event_id = str(uuid.uuid5(run_id, f"run.waiting/{seq}"))
        payload = {
            "event_id": event_id,
            "type": "run.waiting",
            "run_id": str(run_id),
            "tenant_id": state.principal.tenant_id,
            "resource": dict(state.resource),
            "waits": waits,
            "at": _iso(event.at),
        }
        told.append(
            {"event_id": event_id, "topic": "run.waiting", "payload": payload, "created_at": _iso(event.at)}
        )
    return told


def _terminal_records(
    run_id: uuid.UUID, state: RunState, finished: RunFinished
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The audit event and the outbox event of a run's end, which commit with the end itself."""
    event_id = uuid.uuid5(run_id, "run.finished")  # stable: receivers de-duplicate on it
    payload = {
        "event_id": str(event_id),
        "type": "run.finished",
        "run_id": str(run_id),
        "tenant_id": state.principal.tenant_id,
        "resource": dict(state.resource),
        "case_id": state.resource.get("case_id"),
        "status": finished.status.value,
        "stop_reason": finished.stop_reason.value if finished.stop_reason else None,
        "result": finished.result,
        "finished_at": finished.at.isoformat(),
    }
    audit = {
        "audit_id": str(uuid.uuid5(run_id, "audit.run.finished")),
        "tenant_id": state.principal.tenant_id,
        "subject": state.principal.subject,
        "action": f"run.{finished.status.value}",
        "data": {
            "stop_reason": payload["stop_reason"],
            "detail": finished.detail,
            "resource": payload["resource"],
            "case_id": payload["case_id"],
        },
        "at": _iso(finished.at),
    }
    outbox = {
        "event_id": str(event_id),
        "topic": "run.finished",
        "payload": payload,
        "created_at": _iso(finished.at),
    }
    return audit, outbox

"""A tenant's runs, newest first, and the decisions that wait for people across them, soonest deadline first:
a page at a time, after a keyset cursor, only what the reader may read.

A reader reads a run of its tenant whose scopes it holds all of (as ``RunStore.run_row``); a decision is
readable with its run. Pages are keyset-paged (``created_at, run_id`` for runs; deadline and a key for
decisions): a page after a cursor is the same whatever was created since, never a row twice, never one
skipped.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from actors.store._operation_rows import operation_of
from actors.store.operations import Operation
from actors.store.questions import Question, _question
from actors.store.resilience import REQUEST_WINDOW_S, Line, retrying
from actors.store.reviews import Review, _review
from actors.store.runs import SUMMARY_COLUMNS
from actors.store.tool_questions import ToolQuestion, tool_question_of
from dag.policy import Principal


@dataclass(frozen=True)
class RunFilter:
    """Which of the reader's runs: any of ``statuses`` (all if empty), whose resource holds every pair of
    ``resource``, created in ``[created_after, created_before)``, and among ``run_ids`` (all if ``None``) —
    with ``descendants``, among them and the child runs of their agent nodes, to any depth."""

    statuses: Collection[str] = ()
    resource: Mapping[str, str] = field(default_factory=dict)
    created_after: datetime | None = None
    created_before: datetime | None = None
    run_ids: Collection[str] | None = None
    descendants: bool = False


@dataclass(frozen=True)
class RunKey:
    """Where a page of runs ends: the last run's creation time and id (the page after it starts below)."""

    created_at: datetime
    run_id: str


@dataclass(frozen=True)
class PendingKey:
    """Where a page of decisions ends: the last one's deadline (``None``: it has none, and sorts last) and
    key."""

    deadline: datetime | None
    key: str


@dataclass(frozen=True)
class Lineage:
    """Where a run sits among agent runs: the agent node it is the child run of (``None``: a run of its own),
    and the run of its own at the top of its tree (``None`` too for a run of its own)."""

    parent_run_id: str | None
    parent_node_id: str | None
    root_run_id: str | None


@dataclass(frozen=True)
class Pending:
    """A decision that waits for a person: the row (an operation awaiting approval or whose outcome is
    unknown, a plan awaiting review, a planner's or a tool's question awaiting its answer) and its run's
    resource."""

    row: Operation | Review | Question | ToolQuestion
    resource: Mapping[str, str]
    sharers: frozenset[str]
    """The principals of the runs an operation's intent was proposed by, the first and those that joined it
    (none may decide it unless their tenant's policy says so); none for a review or a question."""
    deadline: datetime | None
    """By when it must be decided: none for an unknown outcome, which a person may resolve at any time."""
    key: str
    lineage: Lineage
    """Whom the decision's run serves, when it is an agent node's child run."""

    @property
    def position(self) -> PendingKey:
        return PendingKey(self.deadline, self.key)

    def sort_key(self) -> tuple[bool, datetime | str, str]:
        """Soonest deadline first, those without one last, then by ``key`` (as PostgreSQL's ``C`` collation
        orders it: by code point)."""
        return (self.deadline is None, self.deadline or "", self.key)


class _Where:
    """A ``WHERE`` clause and its arguments, numbered as they are added."""

    def __init__(self) -> None:
        self._conditions: list[str] = []
        self.arguments: list[Any] = []

    def argument(self, value: Any) -> str:
        """``value`` as the statement's next argument: its placeholder."""
        self.arguments.append(value)
        return f"${len(self.arguments)}"

    def add(self, condition: str, *values: Any) -> None:
        """``condition``, with ``{}`` standing for each of ``values`` in turn."""
        self._conditions.append(condition.format(*(self.argument(value) for value in values)))

    def readable(self, principal: Principal, runs: RunFilter, alias: str) -> None:
        """The runs (as ``alias``) ``principal`` may read that ``runs`` selects."""
        self.add(f"{alias}.tenant_id = {{}}", principal.tenant_id)
        self.add(f"{alias}.scopes <@ {{}}::text[]", sorted(principal.scopes))
        if runs.statuses:
            self.add(f"{alias}.status = ANY({{}}::text[])", sorted(runs.statuses))
        if runs.resource:
            self.add(f"{alias}.resource @> {{}}::jsonb", dict(runs.resource))
        if runs.created_after is not None:
            self.add(f"{alias}.created_at >= {{}}", runs.created_after)
        if runs.created_before is not None:
            self.add(f"{alias}.created_at < {{}}", runs.created_before)
        if runs.run_ids is not None and runs.descendants:  # down the tree, by the index on parent_run_id
            self.add(
                f"""{alias}.run_id IN (WITH RECURSIVE down(run_id) AS (
                    SELECT x.run_id FROM runs x WHERE x.run_id = ANY({{}}::uuid[])
                    UNION SELECT x.run_id FROM runs x JOIN down ON x.parent_run_id = down.run_id)
                SELECT down.run_id FROM down)""",
                [uuid.UUID(run_id) for run_id in runs.run_ids],
            )
        elif runs.run_ids is not None:
            self.add(f"{alias}.run_id = ANY({{}}::uuid[])", [uuid.UUID(run_id) for run_id in runs.run_ids])

    @property
    def sql(self) -> str:
        return " AND ".join(self._conditions) or "true"


def _lineage(run_id: str) -> str:
    """The columns naming the parent (run and node) and the root of the run ``run_id`` names (a column)."""
    return f"""(SELECT x.parent_run_id FROM runs x WHERE x.run_id = {run_id}) AS lineage_parent_run_id,
        (SELECT x.parent_node_id FROM runs x WHERE x.run_id = {run_id}) AS lineage_parent_node_id,
        (WITH RECURSIVE up(run_id, parent_run_id) AS (
             SELECT x.run_id, x.parent_run_id FROM runs x WHERE x.run_id = {run_id}
             UNION ALL SELECT x.run_id, x.parent_run_id FROM runs x JOIN up ON x.run_id = up.parent_run_id)
         SELECT up.run_id FROM up WHERE up.parent_run_id IS NULL AND up.run_id <> {run_id})
        AS lineage_root_run_id"""


_PENDING: Mapping[str, str] = {
    "operation": f"""
        SELECT o.*, r.resource AS run_resource, 'o:' || o.operation_id::text AS key, {_lineage("o.run_id")},
               ARRAY(SELECT s.subject FROM operation_runs s WHERE s.operation_id = o.operation_id) AS sharers,
               CASE WHEN o.state = 'unknown' THEN NULL ELSE o.expires_at END AS deadline
        FROM operations o JOIN operation_runs s ON s.operation_id = o.operation_id JOIN runs r ON r.run_id = s.run_id
        WHERE o.tenant_id = r.tenant_id AND (o.state = 'unknown' OR (o.state = 'awaiting_approval'
              AND r.finished_at IS NULL AND s.left_at IS NULL AND (o.expires_at IS NULL OR o.expires_at > now())))""",
    "review": f"""
        SELECT p.*, r.resource AS run_resource, {_lineage("p.run_id")}, p.expires_at AS deadline,
               'r:' || p.run_id::text || ':' || lpad(p.round::text, 10, '0') || ':' || p.plan_hash AS key
        FROM plan_reviews p JOIN runs r ON r.run_id = p.run_id
        WHERE p.tenant_id = r.tenant_id AND p.state = 'awaiting' AND p.expires_at > now()
              AND r.finished_at IS NULL""",
    "question": f"""
        SELECT q.*, r.resource AS run_resource, {_lineage("q.run_id")}, q.expires_at AS deadline,
               'q:' || q.run_id::text || ':' || lpad(q.number::text, 10, '0') AS key
        FROM questions q JOIN runs r ON r.run_id = q.run_id
        WHERE q.tenant_id = r.tenant_id AND q.state = 'awaiting' AND q.expires_at > now()
              AND r.finished_at IS NULL""",
    "tool_question": f"""
        SELECT t.*, r.resource AS run_resource, {_lineage("t.run_id")}, t.expires_at AS deadline,
               't:' || t.run_id::text || ':' || t.question_id::text AS key
        FROM tool_questions t JOIN runs r ON r.run_id = t.run_id
        WHERE t.tenant_id = r.tenant_id AND t.state = 'awaiting' AND t.expires_at > now()
              AND r.finished_at IS NULL""",
}
"""Each kind's rows that wait for a person, with their run's resource, their deadline and their key. An
awaiting row of a run that has ended, or past its deadline, waits for nobody: its run expires it. An operation
is found through each run that shares it (its intent's first proposer, and those that joined it), once per
run: it waits while one of them waits on it, a run's filter finds it whichever of them it names, and a reader
sees it through any of them it may read (the page keeps one of each: ``Listing._pending``)."""
PENDING_KINDS = tuple(_PENDING)
_ROW: Mapping[str, Callable[[asyncpg.Record], Operation | Review | Question | ToolQuestion]] = {
    "operation": operation_of,
    "review": _review,
    "question": _question,
    "tool_question": tool_question_of,
}


class Listing:
    """The reads behind ``GET /runs`` and ``GET /decisions``, each within a request's window."""

    def __init__(self, pool: asyncpg.Pool, *, line: Line | None = None) -> None:
        """``line``: where the reads take turns at ``pool`` with the requests' other reads (their own if
        ``None``)."""
        self._pool = pool
        self._line = line or Line(pool.get_max_size())

    async def runs(
        self, principal: Principal, runs: RunFilter, *, after: RunKey | None, limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` rows of the runs ``principal`` may read that ``runs`` selects, newest first, after
        ``after``."""
        where = _Where()
        where.readable(principal, runs, "runs")
        if after is not None:
            where.add("(runs.created_at, runs.run_id) < ({}, {})", after.created_at, uuid.UUID(after.run_id))
        statement = (
            f"SELECT {SUMMARY_COLUMNS} FROM runs WHERE {where.sql} "
            f"ORDER BY runs.created_at DESC, runs.run_id DESC LIMIT {where.argument(limit)}"
        )
        rows = await self._read(statement, where.arguments, "runs read")
        return [dict(row) for row in rows]

    async def pending(
        self,
        principal: Principal,
        runs: RunFilter,
        *,
        kinds: Collection[str] = PENDING_KINDS,
        after: PendingKey | None,
        limit: int,
    ) -> list[Pending]:
        """Up to ``limit`` decisions of ``kinds`` waiting for a person in the runs ``principal`` may read that
        ``runs`` selects, soonest deadline first, after ``after``: each kind's first ``limit``, merged."""
        found: list[Pending] = []
        for kind in PENDING_KINDS:
            if kind in kinds:
                found.extend(await self._pending(kind, principal, runs, after=after, limit=limit))
        found.sort(key=Pending.sort_key)
        return found[:limit]

    async def _pending(
        self, kind: str, principal: Principal, runs: RunFilter, *, after: PendingKey | None, limit: int
    ) -> list[Pending]:
        where = _Where()
        where.readable(principal, runs, "r")
        position = "COALESCE(deadline, 'infinity'::timestamptz)"
        later = "true"
        if after is not None:
            cursor = f"COALESCE({where.argument(after.deadline)}::timestamptz, 'infinity')"
            key = where.argument(after.key)
            later = f'({position} > {cursor} OR ({position} = {cursor} AND key COLLATE "C" > {key}))'
        statement = (
            f"WITH pending AS ({_PENDING[kind]} AND {where.sql}) SELECT * FROM pending WHERE {later} "
            f'ORDER BY {position}, key COLLATE "C" LIMIT {where.argument(limit)}'
        )
        rows = await self._read(statement, where.arguments, f"{kind} decisions read")
        found: dict[str, Pending] = {}
        for row in rows:  # an operation shared by several runs: once
            found.setdefault(
                row["key"],
                Pending(
                    row=_ROW[kind](row),
                    resource=dict(row["run_resource"]),
                    sharers=frozenset(row.get("sharers") or ()),
                    deadline=row["deadline"],
                    key=row["key"],
                    lineage=Lineage(
                        _id_or_none(row["lineage_parent_run_id"]),
                        row["lineage_parent_node_id"],
                        _id_or_none(row["lineage_root_run_id"]),
                    ),
                ),
            )
        return list(found.values())

    async def _read(self, statement: str, arguments: Sequence[Any], what: str) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await retrying(
            lambda: self._pool.fetch(statement, *arguments),
            window_s=REQUEST_WINDOW_S,
            line=self._line,
            what=what,
        )
        return rows


def _id_or_none(value: Any) -> str | None:
    return None if value is None else str(value)

"""A write node, driven as an operation: proposed, approved, executed once, its outcome recorded or reconciled.

``Operate.drive`` is what a round runs for a node whose tool writes, in place of a plain call. It takes the
operation's row from whatever state it is in — a first proposal, an approval that arrived, a recovery after
its supervisor died mid-call, or another run's operation of the same intent, which this run joined — and moves
it, one conditional update at a time, each recorded before it is acted on, to an outcome the node can end
with. The decisions (which state an outcome means, who may approve,
what a reconciling read says) are ``dag.operations``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from actors.calls.call import TaskHandle, ToolOutcome
from actors.run.recorder import now
from actors.store.decisions import DecisionWakeups
from actors.store.operations import Operation, OperationStore
from dag.budget import Budgets
from dag.contracts import ToolContract
from dag.events import ErrorKind, NodeError
from dag.operations import (
    Existence,
    OperationState,
    approval_deadline,
    approval_for,
    arguments_hash,
    call_arguments,
    call_meta,
    existence,
    intent_hash,
    may_still_land,
    not_done_error,
    outcome_state,
    reconcile_arguments,
    reconciled_output,
    reconciled_state,
)
from dag.policy import Decision
from dag.retry import RetryPolicy
from dag.run_state import RunState
from dag.writes import Approval, OperationSpec, Reconcile

log = logging.getLogger(__name__)

CallTool = Callable[[str, dict[str, Any], dict[str, Any]], Awaitable[ToolOutcome]]
"""Call ``tool`` with ``args`` (and ``_meta`` entries) under the run's credentials and the tool's time limit."""
FollowTask = Callable[[TaskHandle, float], Awaitable[ToolOutcome]]
"""Follow an MCP task the write's call started, after the given seconds (its last follower died): its outcome
once it ended, or its handle again (``pending``) once its status changed."""


@dataclass(frozen=True)
class Wait:
    """Why an operation waits, as its round is told: for a person alone (``person``: the run may be parked on
    it, woken by a decision or at ``until``), or for the world too (a reconciling read that may yet tell)."""

    why: str
    person: bool
    until: datetime | None = None


Waiting = Callable[[str, Wait | None], None]
"""``(operation_id, wait)``: the operation now waits (``wait``), or no longer does (``None``)."""

AWAITING_APPROVAL = "awaiting approval"
"""Why an operation waits for a person, as its round is told: an approval."""
AWAITING_RESOLUTION = "outcome unknown: a person may resolve it"
OPERATION_EXPIRED = "OPERATION_EXPIRED"
OPERATION_REJECTED = "OPERATION_REJECTED"
OPERATION_FAILED = "OPERATION_FAILED"
RESOLUTION_EXPIRED = "RESOLUTION_EXPIRED"
"""A node's error code when its write's outcome stayed unknown past ``resolution_wait_s``: the operation stays
``unknown`` for a person; the run stops waiting on it."""


@dataclass(frozen=True)
class Operate:
    """What every write of a round shares: the ledger, who records, and how often it looks again."""

    store: OperationStore
    actor: str
    """Who the round's transitions are recorded as (``supervisor:<name>``)."""
    decisions: DecisionWakeups = field(default_factory=lambda: DecisionWakeups(None))
    """What wakes an operation waiting on a person when a decision is written (its row is read then, and at
    least every ``decisions.read_every_s``)."""
    poll_s: float = 0.25
    """How often an operation whose reconciling read found no effect looks again (the call may still land)."""
    reconcile_every_s: float = 5.0
    """How often an unknown operation's reconciling read is tried again while it cannot tell."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How long a task whose follower died waits to be followed again, and how often it is
    (``RetryPolicy.refollow_delay``)."""
    rng: random.Random = field(default_factory=random.Random)
    """The jitter of those waits."""

    async def drive(
        self,
        state: RunState,
        node_id: str,
        contract: ToolContract,
        args: Mapping[str, Any],
        decision: Decision,
        *,
        call_limit_s: float,
        call: CallTool,
        waiting: Waiting,
        follow: FollowTask | None = None,
        let_go: asyncio.Event | None = None,
    ) -> ToolOutcome:
        """The write node's outcome, once its operation has one. ``follow`` follows a task its call started
        (a tool that runs as an MCP task): without it, such a call's outcome is unknown. ``let_go`` is set
        when the run goes on elsewhere (the supervisor hands it over, or lost its lease): a write whose task is
        on its row is then left executing, for the run's owner to follow."""
        spec = contract.operation
        assert spec is not None, "only a write tool with an operation declared is driven here"
        started = now()
        digest = arguments_hash(args)
        run_id = state.run_id
        row = await self.store.propose(
            run_id=run_id,
            node_id=node_id,
            tenant_id=state.principal.tenant_id,
            subject=state.principal.subject,
            resource=state.resource,
            tool=contract.name,
            description=contract.description,
            risk=contract.risk,
            approval=approval_for(spec, contract.risk),
            recording=contract.recording,
            args=args,
            args_hash=digest,
            intent=spec.intent,
            intent_hash=intent_hash(spec.intent, args),
            actor=self.actor,
            # A continuation proposing a write of the run it continues takes that operation over, by id.
            carried=state.carried_operations.get((contract.name, digest)),
        )
        op_id = row.operation_id
        lost = False  # its recorded task was found lost: only a reconciling read or a person can tell
        try:
            while True:
                match row.state:
                    case OperationState.PROPOSED:
                        note = f"arguments fit the contract; {decision.rule_id}"
                        moved = await self.store.move(
                            op_id, OperationState.VALIDATED, actor=self.actor, note=note
                        )
                    case OperationState.VALIDATED:
                        moved = await self._ask(row, spec, decision, state.budgets)
                    case OperationState.AWAITING_APPROVAL:
                        waiting(op_id, Wait(AWAITING_APPROVAL, person=True, until=row.expires_at))
                        moved = await self._await_decision(row, run_id)
                    case OperationState.APPROVED:
                        waiting(op_id, None)
                        moved = await self._execute(row, spec, call, follow, let_go)
                    case OperationState.EXECUTING if row.task is not None and follow is not None:
                        moved = await self._settle_by_task(row, follow)  # its task says how it ends
                    case OperationState.EXECUTING:  # found executing, by a caller that is not this one
                        moved = await self._await_caller(row, call_limit_s)
                    case OperationState.UNKNOWN if row.task is not None and follow is not None and not lost:
                        moved = await self._settle_by_task(row, follow)
                        lost = moved is None  # the task cannot tell: a reconciling read or a person may
                    case OperationState.UNKNOWN:
                        resolve_by = row.updated_at + timedelta(seconds=state.budgets.resolution_wait_s)
                        if now() >= resolve_by:
                            waiting(op_id, None)
                            return _unresolved(row, started)
                        moved = await self._reconcile(
                            row, spec, call, call_limit_s, waiting, resolve_by, run_id
                        )
                    case _:
                        waiting(op_id, None)
                        return _outcome_of(row, started)
                row = moved if moved is not None else await self._reread(op_id)
        except asyncio.CancelledError:
            waiting(op_id, None)
            raise

    async def expire_unexecuted(self, run_id: str, *, note: str) -> list[str]:
        """Expire the run's operations that have not begun executing (its run stopped): awaiting a person, or
        approved and not yet claimed, unless another live run shares them and still waits on them. A later
        yes executes nothing; a claim that won first executes, and its outcome is recorded as always. The ids
        of those expired."""
        return await self.store.expire_unshared(run_id, actor=self.actor, note=note)

    async def expired_of(self, run_id: str) -> set[str]:
        """The ids of the run's operations that expired (at their deadline, or when the run stopped)."""
        return {
            row.operation_id for row in await self.store.of_run(run_id) if row.state is OperationState.EXPIRED
        }

    async def _reread(self, op_id: str) -> Operation:
        row = await self.store.get(op_id)
        assert row is not None, "an operation's row is never deleted"
        return row

    async def _ask(
        self, row: Operation, spec: OperationSpec, decision: Decision, budgets: Budgets
    ) -> Operation | None:
        if row.approval is Approval.POLICY:
            return await self.store.move(
                row.operation_id,
                OperationState.APPROVED,
                actor=f"policy:{decision.rule_id}",
                note=decision.reason,
            )
        return await self.store.move(
            row.operation_id,
            OperationState.AWAITING_APPROVAL,
            actor=self.actor,
            expires_at=approval_deadline(now(), spec, budgets),
            note="a person must approve these exact arguments",
        )

    async def _await_decision(self, row: Operation, run_id: str) -> Operation | None:
        """Wait for a person's decision, which lands in the row (and wakes ``run_id``, as every run sharing
        the operation); expire the operation at its deadline."""
        with self.decisions.watching(run_id) as woken:
            while True:
                if row.expires_at is not None and now() >= row.expires_at:
                    return await self.store.move(
                        row.operation_id,
                        OperationState.EXPIRED,
                        actor="deadline",
                        note="no decision before the operation's deadline",
                        sources={OperationState.AWAITING_APPROVAL},
                    )
                left = (row.expires_at - now()).total_seconds() if row.expires_at is not None else None
                await self._woken(woken, left)
                current = await self._reread(row.operation_id)
                if current.state is not OperationState.AWAITING_APPROVAL:
                    return current

    async def _await_caller(self, row: Operation, call_limit_s: float) -> Operation | None:
        """The operation executes under a caller that is not this drive: another run sharing the intent, another
        node of this run, or a caller of this run that stopped. Its outcome is that caller's to record while
        its call may still land; after that nobody will, and it is ``unknown``, to reconcile."""
        while may_still_land(row.executing_since, call_limit_s=call_limit_s, now=now()):
            await asyncio.sleep(self.poll_s)
            row = await self._reread(row.operation_id)
            if row.state is not OperationState.EXECUTING:
                return row
        return await self.store.move(
            row.operation_id,
            OperationState.UNKNOWN,
            actor=self.actor,
            note="found executing past its call's limit: its caller did not record its outcome",
            sources={OperationState.EXECUTING},
        )

    async def _execute(
        self,
        row: Operation,
        spec: OperationSpec,
        call: CallTool,
        follow: FollowTask | None,
        let_go: asyncio.Event | None = None,
    ) -> Operation | None:
        """Claim the one execution right, call the tool once, and record what its outcome means (a call that
        runs as a task: once the task ended, its handle recorded on the row before it is followed)."""
        claimed = await self.store.move(
            row.operation_id,
            OperationState.EXECUTING,
            actor=self.actor,
            sources={OperationState.APPROVED},
        )
        if claimed is None:
            return None  # another caller took it: read what it did
        try:
            outcome = await call(
                row.tool, call_arguments(spec, row.args, row.operation_id), call_meta(spec, row.operation_id)
            )
            if outcome.task is not None and follow is not None:
                outcome = await self._followed(row.operation_id, outcome.task, outcome, follow)
        except asyncio.CancelledError:  # the run stopped with the write out: nobody can say what it did
            await asyncio.shield(self._abandoned(row.operation_id, let_go))
            raise
        target = outcome_state(outcome.error)
        note = None if outcome.error is None else f"{outcome.error.code}: {outcome.error.message}"[:500]
        return await self.store.move(
            row.operation_id,
            target,
            actor=self.actor,
            note=note,
            sources={OperationState.EXECUTING, OperationState.UNKNOWN},
            output=outcome.output,
            has_output=target is OperationState.SUCCEEDED,
            error=outcome.error,
        )

    async def _followed(
        self, op_id: str, task: TaskHandle, outcome: ToolOutcome, follow: FollowTask
    ) -> ToolOutcome:
        """The outcome of the write's task, followed to its end; each handle recorded on the row first."""
        deaths = 0
        while True:
            after_s = 0.0
            if outcome.pending:
                assert outcome.task is not None
                task = outcome.task
                await self.store.record_task(op_id, task.json())
            elif outcome.error is not None and outcome.error.runtime_failure:
                deaths += 1  # its follower died: the task did not
                wait = self.retry.refollow_delay(deaths, self.rng)
                if wait is None:
                    return outcome  # its followers keep dying: the call failed
                after_s = wait
            else:
                return outcome
            outcome = await follow(task, after_s)

    async def _abandoned(self, op_id: str, let_go: asyncio.Event | None) -> None:
        """The write's caller was cut short: its outcome is unknown, unless the run goes on elsewhere (handed
        over, its lease lost) and the write runs as a task already on its row (the task is its receipt, and the
        run's owner follows it)."""
        if let_go is not None and let_go.is_set():
            current = await self.store.get(op_id)
            if current is not None and current.task is not None:
                return
        await self.store.move(
            op_id,
            OperationState.UNKNOWN,
            actor=self.actor,
            note="the run stopped while the write was out",
            sources={OperationState.EXECUTING},
        )

    async def _settle_by_task(self, row: Operation, follow: FollowTask) -> Operation | None:
        """An operation found executing (or unknown) with a task recorded: its outcome is the task's, read by
        following it from here (following moves nothing at the server). A task the server lost leaves it
        ``unknown``, for a reconciling read or a person."""
        assert row.task is not None
        task = TaskHandle.of(row.task)
        outcome = await self._followed(row.operation_id, task, await follow(task, 0.0), follow)
        target = outcome_state(outcome.error)
        note = (
            "its task ended"
            if outcome.error is None
            else f"its task: {outcome.error.code}: {outcome.error.message}"
        )
        return await self.store.move(
            row.operation_id,
            target,
            actor=self.actor,
            note=note[:500],
            sources={OperationState.EXECUTING, OperationState.UNKNOWN},
            output=outcome.output,
            has_output=target is OperationState.SUCCEEDED,
            error=outcome.error,
        )

    async def _reconcile(
        self,
        row: Operation,
        spec: OperationSpec,
        call: CallTool,
        call_limit_s: float,
        waiting: Waiting,
        resolve_by: datetime,
        run_id: str,
    ) -> Operation | None:
        """Find out whether an unknown operation's effect exists; until something can tell, a person may (by
        ``resolve_by``: a resolution wakes ``run_id``)."""
        reconcile = spec.reconcile
        if reconcile is not None:
            arguments = reconcile_arguments(reconcile, row.args, row.operation_id)
            if arguments is not None:
                outcome = await call(reconcile.tool, arguments, {})
                seen, settled = await settle(self.store, row, reconcile, outcome, call_limit_s=call_limit_s)
                if settled is not None:
                    return settled
                if (
                    seen is Existence.ABSENT
                ):  # the call that was out may still land: look again once it cannot
                    waiting(row.operation_id, None)
                    await asyncio.sleep(self.poll_s)
                    return None
        # With a read that may yet tell, the run waits on the world as well, and reads again soon; without
        # one, on a person alone, until its resolution deadline.
        waiting(row.operation_id, Wait(AWAITING_RESOLUTION, person=reconcile is None, until=resolve_by))
        clock = asyncio.get_running_loop().time
        left_s = max(0.0, (resolve_by - now()).total_seconds())
        deadline = clock() + (min(self.reconcile_every_s, left_s) if reconcile else left_s)
        with self.decisions.watching(run_id) as woken:
            while clock() < deadline:
                await self._woken(woken, deadline - clock())
                current = await self._reread(row.operation_id)
                if current.state is not OperationState.UNKNOWN:
                    return current
        return None

    async def _woken(self, woken: asyncio.Event, within_s: float | None) -> None:
        """Until ``woken`` (a decision about the run was written), ``within_s`` passes, or it is time to read
        the row anyway; then ready to be woken again, before the row is read."""
        wait_s = self.decisions.read_every_s
        if within_s is not None:
            wait_s = min(wait_s, within_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(woken.wait(), max(0.0, wait_s))
        woken.clear()


async def settle(
    store: OperationStore, row: Operation, reconcile: Reconcile, outcome: ToolOutcome, *, call_limit_s: float
) -> tuple[Existence, Operation | None]:
    """What a reconciling read's ``outcome`` says of ``row``'s effect, and the row it settled (``None``: the
    read could not tell yet, and the operation stays ``unknown``)."""
    seen = existence(reconcile, outcome.output, row.args) if outcome.error is None else Existence.UNCLEAR
    settled = reconciled_state(
        seen, executing_since=row.executing_since, call_limit_s=call_limit_s, now=now()
    )
    if settled is None:
        return seen, None
    moved = await store.move(
        row.operation_id,
        settled,
        actor=f"reconcile:{reconcile.tool}",
        note=f"the reconciling read found the effect {seen.value}",
        sources={OperationState.UNKNOWN},
        output=reconciled_output(reconcile, outcome.output),
        has_output=settled is OperationState.SUCCEEDED,
        error=not_done_error("the reconciling read found no effect: the write did not happen")
        if settled is OperationState.FAILED
        else None,
    )
    return seen, moved


ReadFor = Callable[[Operation, ToolContract, dict[str, Any]], Awaitable[ToolOutcome]]
"""Call a reconciling read for an operation (as its run's principal, over its run's resource)."""


async def sweep(
    store: OperationStore,
    catalogue: Mapping[str, ToolContract],
    read: ReadFor,
    *,
    actor: str,
    call_limit_s: Callable[[ToolContract], float],
) -> None:
    """Settle what no round drives any more: the writes of runs that ended with them out or unknown.

    A write still marked ``executing`` whose call can no longer land becomes ``unknown``; an unknown one whose
    tool declares a reconciling read is settled by it when the read can tell. What cannot be settled stays
    ``unknown``, for a person (``resolve``) and the metric of the oldest unknown operation.
    """
    for row in await store.unattended():
        contract = catalogue.get(row.tool)
        if contract is None or contract.operation is None:
            continue  # a tool this supervisor does not serve: another one's sweep settles it
        limit_s = call_limit_s(contract)
        if row.state is OperationState.EXECUTING:
            if row.executing_since is None or may_still_land(
                row.executing_since, call_limit_s=limit_s, now=now()
            ):
                continue  # its call may still land
            moved = await store.move(
                row.operation_id,
                OperationState.UNKNOWN,
                actor=actor,
                note="its run ended with the write out",
                sources={OperationState.EXECUTING},
            )
            if moved is None:
                continue
            row = moved
        reconcile = contract.operation.reconcile
        read_contract = catalogue.get(reconcile.tool) if reconcile is not None else None
        if reconcile is None or read_contract is None:
            continue
        arguments = reconcile_arguments(reconcile, row.args, row.operation_id)
        if arguments is None:
            continue
        outcome = await read(row, read_contract, arguments)
        await settle(store, row, reconcile, outcome, call_limit_s=limit_s)


def _unresolved(row: Operation, started: datetime) -> ToolOutcome:
    """What the node ends with when nobody resolved its write's unknown outcome in time."""
    error = NodeError(
        kind=ErrorKind.UNKNOWN_EFFECT,
        code=RESOLUTION_EXPIRED,
        message=f"operation {row.operation_id}'s outcome stayed unknown past its resolution deadline",
    )
    return ToolOutcome(output=None, error=error, started_at=started, finished_at=now())


def _outcome_of(row: Operation, started: datetime) -> ToolOutcome:
    """What the node ends with, once its operation has."""
    finished = now()
    match row.state:
        case OperationState.SUCCEEDED:
            return ToolOutcome(output=row.output, error=None, started_at=started, finished_at=finished)
        case OperationState.FAILED:
            error = row.error or NodeError(
                kind=ErrorKind.BUSINESS, code=OPERATION_FAILED, message="the operation failed"
            )
        case OperationState.REJECTED:
            error = NodeError(
                kind=ErrorKind.AUTHORIZATION,
                code=OPERATION_REJECTED,
                message=f"operation {row.operation_id} was rejected",
            )
        case OperationState.EXPIRED:
            error = NodeError(
                kind=ErrorKind.AUTHORIZATION,
                code=OPERATION_EXPIRED,
                message=f"operation {row.operation_id} was not approved before its deadline",
            )
        case _:
            raise AssertionError(f"no outcome for an operation in state {row.state}")
    return ToolOutcome(output=None, error=error, started_at=started, finished_at=finished)

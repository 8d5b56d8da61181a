"""Agent nodes' child runs (``ChildRuns``): each created once, under the id its parent recorded first, driven like
any run by this supervisor's service, waited on, and read back as the parent node's outcome and spend.

What a child may be (its tools, depth, budgets) was decided by ``dag.agents`` before its parent named it; its
admission (``Intake.new_child``) weighs it as any run's. A continued parent's node whose identical node's child
did not complete (``StartAgent.continues``) starts its child as a continuation of that child, once it has ended,
if it may be continued (``dag.continuation.continues_child``): what it read is carried, not read again.

Nothing of a child's result is ever more than data to its parent: bounded (``dag.agents.bounded_result``),
never observed as values the parent may name, never read as a plan, a policy or a scope.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from actors.calls.call import ToolOutcome
from actors.run.context import Interruption
from actors.run.continuation import Continuations
from actors.run.intake import Intake, NewRun
from actors.run.recorder import now
from actors.run.submission import Cancellation, Submission, SubmitResult
from actors.store.resilience import RUN_WINDOW_S
from actors.store.runs import RunStore
from dag.agents import AgentRefusal, AgentRefused, StartAgent, bounded_result
from dag.continuation import continues_child
from dag.events import AgentEnded, ErrorKind, NodeError, ParentLink, RunContinued
from dag.run_state import RunState, fold
from dag.states import RunStatus

log = logging.getLogger(__name__)

WAIT_STEP_S = 30.0
"""How long one wait on a child run lasts before its status is read again (a child driven elsewhere, after a
recovery, is followed in the database)."""
AGENT_REFUSED = "AGENT_REFUSED"
"""The code of an agent node whose child run admission refused: the message says why."""


@dataclass(frozen=True)
class ChildEnd:
    """An agent node's outcome, and what its child run spent (``None``: no child run ever started)."""

    outcome: ToolOutcome
    ended: AgentEnded | None


class ChildRuns:
    """Creates, waits on and cancels agent nodes' child runs, through the service that drives every run."""

    def __init__(
        self,
        *,
        intake: Intake,
        continuations: Continuations,
        store: RunStore,
        create: Callable[[NewRun], Awaitable[SubmitResult]],
        wait: Callable[[str, float, bool], Awaitable[bool]],
        cancel: Callable[..., Awaitable[Cancellation]],
    ) -> None:
        self._intake = intake
        self._continuations = continuations
        self._store = store
        self._create = create
        self._wait = wait
        self._cancel = cancel
        self._cancelling: set[asyncio.Task[Any]] = set()

    async def run(
        self,
        parent: RunState,
        node_id: str,
        child_run_id: str,
        start: StartAgent | NodeError,
        *,
        trace: Mapping[str, str],
        parked: Callable[[bool], None] = lambda _parked: None,
    ) -> ChildEnd:
        """The outcome of ``parent``'s agent node ``node_id``: its child run ``child_run_id`` is created unless
        it exists (a resumed parent attaches to it), then waited on to its end. ``parked`` is told whether the
        child is parked (waits for people, driven by nobody) each time it is read so: a parent with nothing else
        to do parks too, and the child's end wakes it."""
        started = now()
        if await self._store.run_status(child_run_id, window_s=RUN_WINDOW_S) is None:
            refused = await self._start(parent, node_id, child_run_id, start, trace)
            if refused is not None:
                return ChildEnd(
                    ToolOutcome(output=None, error=refused, started_at=started, finished_at=now()), None
                )
        await self._ended(child_run_id, parked)
        child = fold(stored.event for stored in await self._store.events(child_run_id, window_s=RUN_WINDOW_S))
        ended = AgentEnded(
            at=now(),
            node_id=node_id,
            child_run_id=child_run_id,
            status=child.status,
            stop_reason=child.stop_reason,
            nodes=child.node_count(),
            tokens=child.tokens_used,
            cost_usd=round(child.cost_usd, 9),
        )
        finished = now()
        if child.status is RunStatus.COMPLETED:
            output = bounded_result(child_run_id, dict(child.result) if child.result is not None else None)
            return ChildEnd(ToolOutcome(output, None, started, finished), ended)
        reason = child.stop_reason.value if child.stop_reason is not None else child.status.value.upper()
        error = NodeError(
            kind=ErrorKind.BUSINESS,
            code=reason,
            message=f"child run {child_run_id} ended {child.status.value}: {(child.detail or reason)[:500]}",
        )
        return ChildEnd(ToolOutcome(None, error, started, finished), ended)

    async def _ended(self, child_run_id: str, parked: Callable[[bool], None]) -> None:
        """Return once the child run has ended; ``parked`` is told whether it is parked each time it is read."""
        while True:
            await self._wait(child_run_id, WAIT_STEP_S, True)
            standing = await self._store.run_standing(child_run_id, window_s=RUN_WINDOW_S)
            if standing is not None and RunStatus(standing[0]).terminal:
                return
            parked(standing is not None and standing[1])
            # not ended (parked, handed over, lost): followed in the database until its parent parks too
            await asyncio.sleep(0.1)

    def cancel_soon(self, child_run_id: str, parent_run_id: str, stopped: Interruption) -> None:
        """Stop the child run in the background, for the reason its parent stopped (cancelled, out of time or
        budget): a parent out of budget stops its children with the budget's stop reason."""
        because = Interruption(
            stopped.reason, f"its parent run {parent_run_id} stopped: {stopped.detail}"[:1000]
        )
        task = asyncio.get_running_loop().create_task(self._cancelled(child_run_id, because))
        self._cancelling.add(task)
        task.add_done_callback(self._cancelling.discard)

    async def _cancelled(self, child_run_id: str, because: Interruption) -> None:
        try:
            outcome = await self._cancel(child_run_id, because=because)
        except Exception:
            log.exception("could not cancel child run %s", child_run_id)
            return
        if outcome is Cancellation.NOT_OWNED:
            log.warning("child run %s is driven by another supervisor: not cancelled from here", child_run_id)

    async def _start(
        self,
        parent: RunState,
        node_id: str,
        child_run_id: str,
        start: StartAgent | NodeError,
        trace: Mapping[str, str],
    ) -> NodeError | None:
        """Admit and create the child run; the node's error if it may not start."""
        if isinstance(start, NodeError):
            return start
        loop = start.agent.loop
        link = ParentLink(
            run_id=parent.run_id,
            node_id=node_id,
            depth=start.depth,
            inputs=start.ready.args,
            max_steps=loop.max_steps if loop is not None else None,
        )
        admitted = await self._intake.new_child(parent, child_run_id, link, start, trace)
        if isinstance(admitted, SubmitResult):
            return _refusal(admitted)
        unaffordable = self._intake.first_call_refusal(admitted)
        if unaffordable is not None:  # refused before the child exists, so before its planner is asked
            return unaffordable
        if start.continues is not None:
            continued = await self._continuation(parent, start.continues, admitted)
            if continued is not None:
                admitted = replace(admitted, continued=continued)
        created = await self._create(admitted)
        if created.outcome is not Submission.CREATED or created.run_id != child_run_id:
            return NodeError(
                kind=ErrorKind.CONTRACT,
                code=AGENT_REFUSED,
                message=f"the child run could not be created: {created.outcome.value}",
            )
        return None

    async def _continuation(self, parent: RunState, earlier_id: str, child: NewRun) -> RunContinued | None:
        """What ``child`` carries as the continuation of ``earlier_id``, the child run of the identical node in
        a run ``parent`` continues, once that run has ended (its parent's stop may still be stopping it); or
        ``None``: it may not be continued (it failed, was cancelled, was pruned or continued already), and
        ``child`` starts anew. Its budgets stay those carved for ``child``."""
        await self._ended(earlier_id, lambda _parked: None)
        row = await self._store.run_row(parent.principal, earlier_id)
        by = parent.continued_by
        if row is None or by is None:
            return None
        if not continues_child(
            RunStatus(row["status"]),
            continued=row["continued_by"] is not None,
            pruned=row["pruned_at"] is not None,
        ):
            return None
        earlier = fold(stored.event for stored in await self._store.events(earlier_id, window_s=RUN_WINDOW_S))
        return await self._continuations.carried(earlier, at=child.created.at, by=by)


def _refusal(result: SubmitResult) -> NodeError:
    refusal = result.refusal()
    detail = f"{refusal.problem}: {refusal.detail}" if refusal is not None else result.outcome.value
    message = f"the child run was refused: {detail}"[:1000]
    if result.outcome is Submission.MODEL_NOT_ALLOWED:  # refused before any model was asked
        return AgentRefused(AgentRefusal.MODEL_NOT_ALLOWED, message).node_error()
    return NodeError(kind=ErrorKind.CONTRACT, code=AGENT_REFUSED, message=message)

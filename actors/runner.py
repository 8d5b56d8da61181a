"""The run driver: plan, validate, authorize, dispatch, join — recording every transition before acting.

It decides nothing itself: the scheduler says what can happen, the policy authorizes, the budget stops,
the transition table judges legality, and the planner judges the evidence. It performs and records.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, assert_never

from actors.executor import ToolExecutor
from actors.mcp_client import MODERN_PROTOCOL, ToolCall, ToolOutcome
from dag.budget import STOP_REASON_OF_BUDGET
from dag.contracts import ToolCatalogue
from dag.errors import BudgetExceeded, PlanInvalid
from dag.events import (
    ErrorKind,
    GroupSettled,
    JoinStarted,
    NodeDenied,
    NodeDispatched,
    NodeError,
    NodeExpanded,
    NodeFailed,
    NodeReused,
    NodeSkipped,
    NodeSucceeded,
    PlanAccepted,
    PlanningStarted,
    RunEvent,
    RunFinished,
)
from dag.plan import Plan
from dag.policy import authorize
from dag.run_state import RunState, apply
from dag.scheduler import Expand, Ready, Settle, Skip, Unresolvable, next_steps
from dag.states import RunStatus, StopReason
from dag.validate import check_arguments, validate_plan
from mcp_server.tokens import TaskTokens
from planner.base import Final, NeedsHuman, Observation, Planner, PlanningContext, Replan, ToolSpec

log = logging.getLogger(__name__)


class EventSink(Protocol):
    async def append(self, state: RunState, first_seq: int, events: Sequence[RunEvent]) -> None: ...


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class _Stop:
    reason: StopReason
    detail: str


class RunDriver:
    """Drives runs to a terminal state. One driver serves many concurrent runs."""

    def __init__(
        self,
        *,
        sink: EventSink,
        executor: ToolExecutor,
        catalogue: ToolCatalogue,
        planners: Mapping[str, Planner],
        tokens: TaskTokens,
        mcp_url: str,
        protocol: str = MODERN_PROTOCOL,
    ) -> None:
        self._sink = sink
        self._executor = executor
        self._catalogue = catalogue
        self._planners = planners
        self._tokens = tokens
        self._mcp_url = mcp_url
        self._protocol = protocol

    async def drive(self, state: RunState, last_seq: int) -> RunState:
        run = _Run(state, last_seq, self._sink)
        try:
            await self._drive(run)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("run %s failed inside the runtime", run.state.run_id)
            if not run.state.status.terminal:
                await run.record(
                    RunFinished(
                        at=now(),
                        status=RunStatus.FAILED,
                        stop_reason=StopReason.INTERNAL_ERROR,
                        detail="the runtime failed; see the supervisor's log",
                    )
                )
        return run.state

    async def _drive(self, run: _Run) -> None:
        state = run.state
        planner = self._planners[state.planner]
        context = PlanningContext(
            case_id=state.case_id,
            goal=state.goal,
            tools=[ToolSpec.of(contract) for contract in self._catalogue.values()],
        )
        await run.record(PlanningStarted(at=now(), round=1))
        try:
            proposal = state.proposal if state.proposal is not None else await planner.propose(context)
        except Exception as exc:
            log.warning("planner %s failed for run %s: %s", planner.name, state.run_id, type(exc).__name__)
            await run.finish(
                RunStatus.FAILED, StopReason.PLANNER_ERROR, f"the planner failed: {type(exc).__name__}"
            )
            return
        try:
            plan = validate_plan(Plan.parse(proposal), self._catalogue, max_nodes=state.budgets.max_nodes)
        except PlanInvalid as exc:
            await run.finish(RunStatus.FAILED, StopReason.PLAN_INVALID, json.dumps(exc.as_dict()))
            return
        await run.record(PlanAccepted(at=now(), round=1, plan=plan.to_json()))

        stop = await self._execute(run)
        if stop is not None:
            await run.finish(RunStatus.STOPPED, stop.reason, stop.detail)
            return

        await run.record(JoinStarted(at=now(), round=1))
        decision = await planner.decide(context, observations(run.state))
        match decision:
            case Final():
                await run.record(
                    RunFinished(at=now(), status=RunStatus.COMPLETED, result=dict(decision.result))
                )
            case NeedsHuman():
                await run.record(
                    RunFinished(
                        at=now(),
                        status=RunStatus.NEEDS_HUMAN,
                        stop_reason=decision.stop_reason,
                        detail=decision.detail,
                        result=dict(decision.result) if decision.result is not None else None,
                    )
                )
            case Replan():
                await run.finish(
                    RunStatus.STOPPED,
                    StopReason.REPLAN_LIMIT,
                    f"the planner asked to replan: {decision.reason}",
                )
            case _:
                assert_never(decision)

    async def _execute(self, run: _Run) -> _Stop | None:
        """Dispatch every node the moment its dependencies have outputs; return when nothing more can run."""
        in_flight: dict[asyncio.Task[ToolOutcome], str] = {}
        try:
            while True:
                events, calls, stop = self._decide_steps(run.state)
                if stop is not None:
                    return stop
                if events:
                    await run.record(*events)
                    for call in calls:
                        in_flight[asyncio.create_task(self._executor.run(call))] = call.node_id
                    continue
                if not in_flight:
                    return None
                done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                await run.record(*[_completion(in_flight.pop(task), task.result()) for task in done])
        finally:
            for task in in_flight:
                task.cancel()

    def _decide_steps(self, state: RunState) -> tuple[list[RunEvent], list[ToolCall], _Stop | None]:
        events: list[RunEvent] = []
        calls: list[ToolCall] = []
        claimed: set[str] = set(state.fingerprints)
        executable = state.executable_node_count()
        at = now()
        for step in next_steps(state):
            match step:
                case Skip():
                    events.append(NodeSkipped(at=at, node_id=step.node_id, cause_node_id=step.cause_node_id))
                case Settle():
                    events.append(GroupSettled(at=at, node_id=step.node_id, succeeded=step.succeeded))
                case Unresolvable():
                    error = NodeError(kind=ErrorKind.CONTRACT, code=step.code, message=step.message)
                    events.append(NodeFailed(at=at, node_id=step.node_id, error=error))
                case Expand():
                    try:
                        state.budgets.check_expansion(executable_nodes=executable, fanout=step.count)
                    except BudgetExceeded as exc:
                        return [], [], _Stop(STOP_REASON_OF_BUDGET[exc.budget], f"{step.node_id}: {exc}")
                    executable += step.count
                    events.append(NodeExpanded(at=at, node_id=step.node_id, count=step.count))
                case Ready():
                    event, call = self._gate(state, step, claimed, at)
                    if event is not None:
                        events.append(event)
                    if call is not None:
                        calls.append(call)
                case _:
                    assert_never(step)
        return events, calls, None

    def _gate(
        self, state: RunState, step: Ready, claimed: set[str], at: datetime
    ) -> tuple[RunEvent | None, ToolCall | None]:
        """Contract, then policy, then the fingerprint gate; only then a dispatch."""
        problem = check_arguments(self._catalogue[step.tool], step.args)
        if problem is not None:
            error = NodeError(kind=ErrorKind.CONTRACT, code="INVALID_ARGUMENTS", message=problem)
            return NodeFailed(at=at, node_id=step.node_id, error=error), None
        decision = authorize(
            principal=state.principal,
            run_case_id=state.case_id,
            catalogue=self._catalogue,
            tool=step.tool,
            args=step.args,
        )
        common: dict[str, Any] = {"at": at, "node_id": step.node_id, "tool": step.tool, "args": step.args}
        if not decision.allowed:
            return NodeDenied(**common, fingerprint=step.fingerprint, decision=decision), None
        if step.fingerprint in claimed:
            source_id = state.fingerprints.get(step.fingerprint)
            if source_id is None:
                return None, None  # an identical action is being dispatched in this very step: wait for it
            source = state.nodes[source_id]
            if source.status.has_output:
                return NodeReused(**common, fingerprint=step.fingerprint, source_node_id=source_id), None
            if source.status.terminal:
                error = NodeError(
                    kind=ErrorKind.BUSINESS,
                    code="IDENTICAL_ACTION_FAILED",
                    message=f"the identical action of {source_id!r} already ran and failed",
                )
                return NodeFailed(at=at, node_id=step.node_id, error=error), None
            return None, None  # the identical action is in flight: reuse its output when it lands
        claimed.add(step.fingerprint)
        attempt = 1
        token = self._tokens.mint(
            subject=state.principal.subject,
            tenant_id=state.principal.tenant_id,
            task_id=f"{state.run_id}/{step.node_id}/{attempt}",
            case_id=state.case_id,
            scopes=state.principal.scopes,
        )
        call = ToolCall(
            run_id=state.run_id,
            node_id=step.node_id,
            attempt=attempt,
            tool=step.tool,
            args=step.args,
            mcp_url=self._mcp_url,
            token=token,
            timeout_s=self._catalogue[step.tool].timeout_s,
            protocol=self._protocol,
        )
        return NodeDispatched(
            **common, fingerprint=step.fingerprint, attempt=attempt, decision=decision
        ), call


def _completion(node_id: str, outcome: ToolOutcome) -> RunEvent:
    if outcome.error is None:
        return NodeSucceeded(
            at=now(),
            node_id=node_id,
            output=outcome.output,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
        )
    return NodeFailed(
        at=now(),
        node_id=node_id,
        error=outcome.error,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
    )


def observations(state: RunState) -> list[Observation]:
    """What the joiner sees: every node that was authorized or refused, in run order; groups excluded."""
    seen = []
    for node_id in state.order:
        node = state.nodes[node_id]
        if node.is_group or node.args is None:
            continue
        seen.append(Observation(node_id, node.tool, node.args, node.status, node.output, node.error))
    return seen


class _Run:
    """A run's state plus its event cursor: every event is applied in memory, then persisted, then adopted."""

    def __init__(self, state: RunState, last_seq: int, sink: EventSink) -> None:
        self.state = state
        self.last_seq = last_seq
        self._sink = sink

    async def record(self, *events: RunEvent) -> None:
        if not events:
            return
        state = self.state
        for event in events:
            state = apply(state, event)  # raises IllegalTransition before anything is written
        await self._sink.append(state, self.last_seq + 1, events)
        self.state = state
        self.last_seq += len(events)

    async def finish(self, status: RunStatus, reason: StopReason, detail: str) -> None:
        await self.record(RunFinished(at=now(), status=status, stop_reason=reason, detail=detail))

"""The run driver: plan, execute, join — and replan — recording every transition before acting on it.

It decides nothing itself: the planner proposes and judges the evidence, ``dag`` admits each plan
(``dag.admission``), decides each dispatch (``dag.dispatch``, through ``RoundExecution``, which performs one
round) and concludes each join (``dag.conclusion``). The driver sequences them and records their answers as
the run's transitions.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, assert_never

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from pydantic import ValidationError

from actors.observe.tracing import context_of, tracer
from actors.run.asking import QuestionGate
from actors.run.children import ChildRuns
from actors.run.context import CANCELLED, Cancel, HandedOver, Interruption, Parked
from actors.run.deps import RunDeps
from actors.run.operate import Operate
from actors.run.planning import observations, planning_context
from actors.run.recorder import EventSink, RunRecorder, now
from actors.run.reviewing import ReviewGate
from actors.run.round import RoundExecution
from actors.run.tool_questions import ToolQuestionGate
from actors.store.ownership import LeaseLost
from dag.admission import OverBudget, PlanRefused, RoundAdmitted, ToolUnlisted, admit_round, round_validator
from dag.conclusion import Finish, NextRound, conclude, out_of_model_budget
from dag.errors import PlanErrorCode, PlanInvalid
from dag.events import (
    JoinStarted,
    ModelUsed,
    PlanAccepted,
    PlanCompleted,
    PlanningStarted,
    PlanNodeAccepted,
    RunRecovered,
    RunWoken,
)
from dag.plan import Plan, PlanNode
from dag.run_state import RunState
from dag.states import RunStatus, StopReason
from planner.base import (
    Planner,
    PlannerContractViolation,
    PlannerRefused,
    PlanningContext,
    Question,
    StreamingPlanner,
)
from planner.stream import MalformedStream

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_G = TypeVar("_G", "ReviewGate", "QuestionGate")

JOIN_GRACE_S = 10.0
"""How long a join may still take after the deadline passed: a run that has its answer should complete."""


class _Halt(Exception):
    """Planning was cut short by a cancellation or the deadline."""

    def __init__(self, interruption: Interruption) -> None:
        super().__init__(interruption.detail)
        self.interruption = interruption


class RunDriver:
    """Drives runs to a terminal state. One driver serves many concurrent runs."""

    def __init__(
        self,
        deps: RunDeps,
        *,
        sink: EventSink,
        operate: Operate | None = None,
        review: ReviewGate | None = None,
        questions: QuestionGate | None = None,
        tool_questions: ToolQuestionGate | None = None,
    ) -> None:
        """``sink`` records the runs' transitions; ``operate`` drives write nodes through the operation ledger
        (``None``: no ledger, so no write is called), ``review`` and ``questions`` hold a run for a person (a
        test's driver may have neither); ``tool_questions`` puts a task's question to a person (``None``:
        each is declined)."""
        self._deps = deps
        self._sink = sink
        self._operate = operate
        self._review = review
        self._questions = questions
        self._tool_questions = tool_questions
        self.handover = asyncio.Event()
        """Set when the supervisor stops: every run stops being driven at its next safe point, unfinished."""
        self._checked: dict[str, Plan] = {}
        """Client plans the submission validated, by run, until their round starts."""
        self.children: ChildRuns | None = None
        """Runs agent nodes' child runs, set by the service that composes them (``None``: an agent node fails)."""

    async def drive(
        self,
        state: RunState,
        last_seq: int,
        cancel: Cancel | None = None,
        *,
        recovered: tuple[str, str | None] | None = None,
        checked_plan: Plan | None = None,
    ) -> RunState:
        """Drive a run from whatever state it was recorded in to a terminal one.

        ``recovered`` = (new owner, previous owner) marks a takeover, or the waking of a parked run: it is
        recorded (``RunRecovered``, ``RunWoken``), in-flight calls are dispatched again (a write's goes on from
        its operation's row), and everything else continues from the last recorded transition. Raises
        ``HandedOver`` when the supervisor stops first (the run stays live for another to resume), ``Parked``
        when the run waits for people and for nothing else (recorded as such: a decision or a deadline wakes
        it). ``checked_plan`` is the client's proposal as the submission already validated it: not validated
        again."""
        run = RunRecorder(state, last_seq, self._sink, self._deps.metrics)
        if checked_plan is not None:
            self._checked[state.run_id] = checked_plan
        span = tracer().start_span(
            "run",
            context=context_of(state.trace),
            attributes={"raydag.run_id": state.run_id, "raydag.recovered": recovered is not None},
        )
        attached = otel_context.attach(trace.set_span_in_context(span))
        try:
            if run.state.parked_since is not None:
                assert recovered is not None, "a parked run is driven again only once claimed"
                await run.record(RunWoken(at=now(), owner=recovered[0]))
            elif recovered is not None:
                in_flight = tuple(node.node_id for node in run.state.in_flight())
                await run.record(
                    RunRecovered(
                        at=now(), owner=recovered[0], previous_owner=recovered[1], redispatched=in_flight
                    )
                )
                if run.state.plan_open:  # the model's stream died with the old supervisor: keep what arrived
                    await run.record(
                        PlanCompleted(
                            at=now(),
                            round=run.state.round,
                            complete=False,
                            detail="the plan stream was lost with the supervisor that read it",
                        )
                    )
            await self._drive(run, cancel if cancel is not None else Cancel())
        except (asyncio.CancelledError, LeaseLost, HandedOver, Parked):
            raise
        except Exception:
            log.exception("run %s failed inside the runtime", run.state.run_id)
            if not run.state.status.terminal:
                await run.finish(
                    RunStatus.FAILED,
                    StopReason.INTERNAL_ERROR,
                    "the runtime failed; see the supervisor's log",
                )
        finally:
            self._checked.pop(state.run_id, None)
            span.set_attribute("raydag.status", run.state.status.value)
            if run.state.stop_reason is not None:
                span.set_attribute("raydag.stop_reason", run.state.stop_reason.value)
            if run.state.status in (RunStatus.FAILED, RunStatus.STOPPED):
                span.set_status(Status(StatusCode.ERROR, run.state.stop_reason or ""))
            span.end()
            otel_context.detach(attached)
        return run.state

    async def _drive(self, run: RunRecorder, cancel: Cancel) -> None:
        """Each step reads the recorded status and takes the one transition it allows."""
        planner = self._deps.planners[run.state.planner]
        deadline = run.state.deadline
        plan_changed = asyncio.Event()
        stream: asyncio.Task[None] | None = None
        rounds = _RoundSpans(run.state.run_id)
        try:
            while not run.state.status.terminal:
                if self.handover.is_set():
                    await run.flush()  # a plan accepted is not asked for again by whoever resumes the run
                    raise HandedOver(f"run {run.state.run_id} handed over by a stopping supervisor")
                state = run.state
                rounds.enter(state.round)
                match state.status:
                    case RunStatus.PENDING if cancel.is_set():  # cancelled while it waited for its turn
                        stopped = cancel.interruption
                        if stopped is CANCELLED:
                            stopped = Interruption(
                                StopReason.CANCELLED, "the run was cancelled before it started"
                            )
                        await self._halt(run, stopped)
                    case RunStatus.PENDING if state.proposal is not None:
                        # The run's own plan: no planner is asked, so planning is stored with what follows.
                        await run.stage(PlanningStarted(at=now(), round=state.round + 1))
                    case RunStatus.PENDING:
                        await run.record(PlanningStarted(at=now(), round=state.round + 1))
                    case RunStatus.PLANNING:
                        try:
                            stream = await self._plan(run, planner, cancel, deadline, plan_changed)
                        except _Halt as halt:
                            await self._halt(run, halt.interruption)
                    case RunStatus.WAITING if state.question is not None:
                        await self._gate(self._questions).hold(run, cancel, self.handover)
                    case RunStatus.RUNNING | RunStatus.WAITING if state.awaits_review:
                        await self._gate(self._review).hold(run, cancel, self.handover)
                    case RunStatus.RUNNING | RunStatus.WAITING:
                        execution = RoundExecution(
                            run,
                            self._deps,
                            cancel,
                            deadline,
                            plan_changed,
                            self.handover,
                            operate=self._operate,
                            questions=self._tool_questions,
                            children=self.children,
                        )
                        interruption = await execution.run()
                        if stream is not None:  # the round drained or stopped: the stream has nothing to add
                            stream.cancel()
                            stream = None
                        if interruption is not None and (
                            interruption.reason is StopReason.CANCELLED or cancel.is_set()
                        ):  # cancelled, or stopped by its parent: no join asks its planner anything more
                            await self._halt(run, interruption)
                        else:
                            await run.record(
                                JoinStarted(
                                    at=now(),
                                    round=state.round,
                                    interrupted_by=interruption.reason if interruption else None,
                                    reason=interruption.detail if interruption else None,
                                )
                            )
                    case RunStatus.JOINING:
                        await self._join(run, planner, cancel, deadline)
                    case _:
                        raise AssertionError(f"no step from {state.status}")
        finally:
            if stream is not None:
                stream.cancel()
            rounds.close()

    async def _join(self, run: RunRecorder, planner: Planner, cancel: Cancel, deadline: datetime) -> None:
        state = run.state
        if await self._out_of_model_budget(run):
            return
        context = planning_context(state, self._deps)
        try:
            decision = await _bounded(
                planner.decide(context, observations(state)),
                cancel,
                deadline + timedelta(seconds=JOIN_GRACE_S),
                self.handover,
            )
        except HandedOver:
            raise
        except _Halt as halt:
            await self._record_usage(run, context, "join")
            await self._halt(run, _interruption_of(state) or halt.interruption)
            return
        except Exception as exc:
            await self._record_usage(run, context, "join")
            await self._planner_failed(run, planner, exc)
            return
        await self._record_usage(run, context, "join")
        match conclude(run.state, decision):
            case Finish() as finish:
                await run.finish(finish.status, finish.stop_reason, finish.detail, finish.result)
            case NextRound(reason=reason):
                await run.record(PlanningStarted(at=now(), round=run.state.round + 1, reason=reason))
            case unexpected:
                assert_never(unexpected)

    async def _plan(
        self,
        run: RunRecorder,
        planner: Planner,
        cancel: Cancel,
        deadline: datetime,
        plan_changed: asyncio.Event,
    ) -> asyncio.Task[None] | None:
        """Ask for, validate and accept the current round's plan, or end the run.

        A streaming planner's nodes are accepted one by one as the model writes them; this returns the task
        still reading the stream, and the round starts executing with the first node.
        """
        state = run.state
        round_number = state.round
        if round_number == 1 and state.proposal is not None:
            checked = self._checked.pop(state.run_id, None)
            if checked is not None:
                await run.stage(PlanAccepted(at=now(), round=1, plan=checked.to_json()))
            else:  # a recovered run: the catalogue may have changed since its submission
                await self._accept(run, state.proposal)
            return None
        if await self._out_of_model_budget(run):
            return None
        context = planning_context(state, self._deps)
        # A reviewed plan is shown to a person whole: it is not streamed into dispatch.
        if isinstance(planner, StreamingPlanner) and planner.streaming and not state.review:
            return await self._plan_streamed(run, planner, context, cancel, deadline, plan_changed)
        try:
            proposal = await _bounded(planner.propose(context), cancel, deadline, self.handover)
        except HandedOver:
            raise
        except _Halt:
            await self._record_usage(run, context, "plan")
            raise
        except Exception as exc:
            await self._record_usage(run, context, "plan")
            await self._planner_failed(run, planner, exc)
            return None
        await self._record_usage(run, context, "plan")
        if await self._out_of_model_budget(run):
            return None
        if isinstance(proposal, Question):  # the planner cannot plan without a person: the run waits
            await self._gate(self._questions).ask(run, proposal.text)
            return None
        await self._accept(run, proposal)
        return None

    async def _accept(self, run: RunRecorder, proposal: Any) -> None:
        """Admit ``proposal`` as the current round's plan (``dag.admission``), or end the run saying why."""
        round_number = run.state.round
        state = run.state
        levels = self._deps.agent_levels(state.depth)
        match admit_round(proposal, state, self._deps.catalogue, self._deps.withdrawn, agent_levels=levels):
            case RoundAdmitted(plan=plan):
                # Acted on only through the dispatches of the round's first step, which store it with them.
                await run.stage(PlanAccepted(at=now(), round=round_number, plan=plan.to_json()))
            case ToolUnlisted(tool=tool):  # its server was never listed: the run stops with its withdrawal
                withdrawn = self._deps.withdrawn[tool]
                await run.finish(RunStatus.STOPPED, withdrawn.stop_reason, withdrawn.detail)
            case PlanRefused(error=error):
                await run.finish(RunStatus.FAILED, StopReason.PLAN_INVALID, json.dumps(error.as_dict()))
            case OverBudget() as over:
                await run.finish(RunStatus.STOPPED, over.stop_reason, over.detail)
            case unexpected:
                assert_never(unexpected)

    async def _plan_streamed(
        self,
        run: RunRecorder,
        planner: StreamingPlanner,
        context: PlanningContext,
        cancel: Cancel,
        deadline: datetime,
        plan_changed: asyncio.Event,
    ) -> asyncio.Task[None] | None:
        state = run.state
        round_number = state.round
        validator = round_validator(
            state, self._deps.catalogue, agent_levels=self._deps.agent_levels(state.depth)
        )
        started = asyncio.Event()
        failure: list[BaseException] = []
        asked: list[Question] = []

        async def consume() -> None:
            complete, detail = True, None
            try:
                async for raw in planner.propose_stream(context):
                    if isinstance(raw, Question):  # in place of any node: the run waits for a person
                        asked.append(raw)
                        return
                    node = PlanNode.model_validate(raw)
                    validator.add(node)
                    await run.record(
                        PlanNodeAccepted(
                            at=now(),
                            round=round_number,
                            node=node.model_dump(mode="json", by_alias=True, exclude_defaults=True),
                        )
                    )
                    started.set()
                    plan_changed.set()
            except asyncio.CancelledError:
                raise
            except (PlanInvalid, MalformedStream, ValidationError, PlannerContractViolation) as exc:
                complete, detail = False, f"the plan stream stopped at a malformed node: {str(exc)[:300]}"
            except Exception as exc:
                if not started.is_set():
                    failure.append(exc)  # nothing ran: the planner failed, not the tail of its plan
                    return
                complete, detail = False, f"the plan stream failed: {type(exc).__name__}"
            finally:
                await self._record_usage(run, context, "plan")
            if not started.is_set() and complete:
                failure.append(PlanInvalid(PlanErrorCode.EMPTY_PLAN, "the streamed plan has no node"))
                return
            await run.record(PlanCompleted(at=now(), round=round_number, complete=complete, detail=detail))
            started.set()
            plan_changed.set()

        task = asyncio.create_task(consume(), name=f"plan-stream:{state.run_id}")
        done_or_started = asyncio.ensure_future(started.wait())
        try:
            await _bounded(
                asyncio.wait({task, done_or_started}, return_when=asyncio.FIRST_COMPLETED),
                cancel,
                deadline,
                self.handover,
            )
        except (_Halt, HandedOver):
            task.cancel()
            raise
        finally:
            done_or_started.cancel()
        if asked:
            if not await self._out_of_model_budget(run):
                await self._gate(self._questions).ask(run, asked[0].text)
            return None
        if failure:
            error = failure[0]
            if isinstance(error, PlanInvalid):
                await run.finish(RunStatus.FAILED, StopReason.PLAN_INVALID, json.dumps(error.as_dict()))
            else:
                await self._planner_failed(run, planner, error)
            return None
        return task

    async def _record_usage(
        self, run: RunRecorder, context: PlanningContext, purpose: Literal["plan", "join"]
    ) -> None:
        """Every model call the planner reported for this request, as events (then the list is emptied)."""
        calls, context.usage[:] = list(context.usage), []
        for call in calls:
            if not call.reported:
                log.warning(
                    "run %s: the model endpoint reported no usage for a %s call to %s; charged an upper bound "
                    "of %d tokens",
                    run.state.run_id,
                    purpose,
                    call.model,
                    call.input_tokens + call.output_tokens,
                )
        await run.record(
            *(
                ModelUsed(
                    at=now(),
                    purpose=purpose,
                    model=call.model,
                    input_tokens=call.input_tokens,
                    output_tokens=call.output_tokens,
                    cost_usd=call.cost_usd,
                    reported=call.reported,
                )
                for call in calls
            )
        )

    async def _out_of_model_budget(self, run: RunRecorder) -> bool:
        """Stop the run if its model calls have spent the token or cost budget; ``True`` if it did."""
        spent = out_of_model_budget(run.state)
        if spent is None:
            return False
        await run.finish(spent.status, spent.stop_reason, spent.detail)
        return True

    async def _planner_failed(self, run: RunRecorder, planner: Planner, error: BaseException) -> None:
        match error:
            case PlannerRefused():
                await run.finish(
                    RunStatus.NEEDS_HUMAN, StopReason.MODEL_REFUSED, f"the model refused: {error}"
                )
            case PlannerContractViolation():
                await run.finish(
                    RunStatus.NEEDS_HUMAN, StopReason.PLANNER_CONTRACT_VIOLATION, str(error)[:1000]
                )
            case _:
                log.warning(
                    "planner %s failed for run %s: %s", planner.name, run.state.run_id, type(error).__name__
                )
                await run.finish(
                    RunStatus.FAILED, StopReason.PLANNER_ERROR, f"the planner failed: {type(error).__name__}"
                )

    async def _halt(self, run: RunRecorder, interruption: Interruption) -> None:
        status = RunStatus.CANCELLED if interruption.reason is StopReason.CANCELLED else RunStatus.STOPPED
        await run.finish(status, interruption.reason, interruption.detail)

    @staticmethod
    def _gate(gate: _G | None) -> _G:
        """A gate this driver was given: a run that waits for a person needs one (the supervisor's driver has
        both; a test's may not)."""
        if gate is None:
            raise AssertionError("this run waits for a person, and the driver was given no gate for it")
        return gate


class _RoundSpans:
    """One span per plan round (planning, execution, join), current while the round is: node and checkpoint
    spans of the round become its children."""

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self._round = 0
        self._span: trace.Span | None = None
        self._attached: Any = None

    def enter(self, round_number: int) -> None:
        if round_number in (0, self._round):
            return
        self.close()
        self._round = round_number
        self._span = tracer().start_span(
            f"round {round_number}", attributes={"raydag.run_id": self._run_id, "raydag.round": round_number}
        )
        self._attached = otel_context.attach(trace.set_span_in_context(self._span))

    def close(self) -> None:
        if self._span is not None:
            self._span.end()
            otel_context.detach(self._attached)
            self._span = None


def _interruption_of(state: RunState) -> Interruption | None:
    """The hard limit that ended the round being joined, as recorded in its ``join_started``."""
    if state.interrupted_by is None:
        return None
    return Interruption(state.interrupted_by, state.interruption_detail or state.interrupted_by.value)


async def _bounded(
    work: Awaitable[_T], cancel: Cancel, deadline: datetime, handover: asyncio.Event | None = None
) -> _T:
    """Await ``work`` unless the run is cancelled or ``deadline`` passes first (then raise ``_Halt``), or the
    supervisor hands its runs over (then raise ``HandedOver``: the work is asked for again on resumption)."""
    task = asyncio.ensure_future(work)
    cancelled = asyncio.create_task(cancel.wait())
    handed_over = asyncio.create_task((handover or asyncio.Event()).wait())
    try:
        remaining = max(0.0, (deadline - now()).total_seconds())
        done, _ = await asyncio.wait(
            {task, cancelled, handed_over}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done:
            return task.result()
        if cancelled in done:
            raise _Halt(cancel.interruption)
        if handed_over in done:
            raise HandedOver("the supervisor stopped while the planner was answering")
        raise _Halt(Interruption(StopReason.DEADLINE_EXCEEDED, "the run's deadline passed while planning"))
    finally:
        task.cancel()
        cancelled.cancel()
        handed_over.cancel()

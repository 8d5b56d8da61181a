"""One plan round, executed: nodes dispatched the moment they are ready, retried, timed out, limited, cancelled.

The decisions come from ``dag``: the scheduler (what is ready), the policy (may it run), the gate (has it
run), the budget (must we stop), the retry policy (try again?) and the circuit breaker (is the tool well).
This module performs them and records each transition before acting on it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from datetime import datetime
from typing import Any, assert_never, cast

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from actors.calls.call import ToolCall, ToolOutcome
from actors.observe.tracing import carrier, tracer
from actors.run.context import ExecutionContext, HandedOver, Interruption
from actors.run.recorder import RunRecorder, now
from dag.budget import STOP_REASON_OF_BUDGET
from dag.contracts import ToolContract
from dag.errors import BudgetExceeded
from dag.events import (
    ErrorKind,
    GroupSettled,
    NodeDenied,
    NodeDispatched,
    NodeError,
    NodeExpanded,
    NodeFailed,
    NodeRetryScheduled,
    NodeReused,
    NodeSkipped,
    NodeSucceeded,
    RunEvent,
    RuntimeFailure,
)
from dag.gate import AlreadyFailed, Dispatch, RepeatLimit, Reuse, Wait, gate
from dag.health import Go, HealthKey, WaitFor, counts_against_tool
from dag.policy import Decision, authorize, observed_values
from dag.run_state import RunState, apply
from dag.scheduler import Expand, Frontier, Ready, Runnable, Settle, Skip, Step, Unresolvable, resolve
from dag.states import NodeStatus, StopReason
from dag.validate import check_arguments

HELD_AT_MOST_S = 0.05
"""How long what a round decided and nothing acts on yet (outcomes that make no node ready while other calls
are out) waits to be stored with the next append. A wide layer's outcomes land a few at a time; one append each
was several appends the layer's last outcome queued behind. It is stored before anything acts on it, with the
next dispatch or the round's end, or after this long, so that a run's events lag its calls by no more."""


class RoundExecution:
    def __init__(
        self,
        run: RunRecorder,
        context: ExecutionContext,
        cancel: asyncio.Event,
        deadline: datetime,
        plan_changed: asyncio.Event | None = None,
        handover: asyncio.Event | None = None,
    ) -> None:
        """``plan_changed`` is set whenever a streamed plan gains a node or ends: the round dispatches the new
        node at once, and cannot drain while the plan is still open. ``handover`` is set when the supervisor
        shuts down: nothing more is dispatched, the calls in flight land and are recorded, and the round
        raises ``HandedOver``."""
        self._run = run
        self._context = context
        self._plan_changed = plan_changed
        self._cancel = cancel
        self._handover = handover if handover is not None else asyncio.Event()
        self._deadline = deadline
        self._calls: dict[asyncio.Task[ToolOutcome], str] = {}
        self._spans: dict[str, trace.Span] = {}
        """The span of each node's attempt in flight, ended when its outcome is recorded."""
        self._timers: dict[asyncio.Task[None], str] = {}
        self._frontier = Frontier()
        self._landed: list[RunEvent] = []
        """Outcomes of calls that landed, recorded in one write with the steps they make possible."""
        self._due: list[str] = []
        """Retries whose backoff has passed, waiting for a free slot under ``max_parallel`` (or for the
        tool's circuit to let them through)."""
        self._alarm: asyncio.Task[None] | None = None
        """Wakes the round when a resting tool's circuit lets calls through again."""
        self._probes: dict[str, HealthKey] = {}
        """Nodes whose call in flight is the probe of a half-open circuit."""
        self._tool_failures: Counter[str] = Counter()
        """Per node, the attempts its tool's own failures used up (not those of a tool in an outage)."""
        self._runtime_failures: Counter[str] = Counter()
        """Per node, the failures of raydag's machinery (dead workers) it has been through."""
        fields = context.observed_fields()
        state = run.state
        self._observed_fields = fields
        self._observed = observed_values(
            (node.output for node in state.nodes.values() if node.status.has_output and not node.is_group),
            fields,
        )

    async def run(self) -> Interruption | None:
        """Execute until nothing more can run; ``None`` when the round drained, else why it stopped."""
        cancelled = asyncio.create_task(self._cancel.wait())
        handover = asyncio.create_task(self._handover.wait())
        try:
            await self._resume_in_flight()
            while True:
                if self._cancel.is_set():
                    await self._record_landed()
                    return Interruption(StopReason.CANCELLED, "the run was cancelled")
                if self._handover.is_set():
                    await self._record_landed()
                    await self._land_in_flight()
                    await self._run.flush()
                    raise HandedOver(f"run {self._run.state.run_id} handed over by a stopping supervisor")
                remaining = (self._deadline - now()).total_seconds()
                if remaining <= 0:
                    await self._record_landed()
                    limit = self._run.state.budgets.deadline_s
                    return Interruption(
                        StopReason.DEADLINE_EXCEEDED, f"the run's deadline of {limit:g}s passed"
                    )
                if self._plan_changed is not None:
                    self._plan_changed.clear()  # before the scheduler looks, so no arrival goes unseen
                progress = await self._step()
                if isinstance(progress, Interruption):
                    return progress
                if progress:
                    continue
                if self._idle():
                    return None
                streaming = self._plan_changed is not None and self._run.state.plan_open
                waiting: set[asyncio.Future[Any]] = {*self._calls, *self._timers, cancelled, handover}
                if self._alarm is not None:
                    waiting.add(self._alarm)
                arrival = None
                if streaming:
                    assert self._plan_changed is not None
                    arrival = asyncio.ensure_future(self._plan_changed.wait())
                    waiting.add(arrival)
                held = self._run.staged_for()
                timeout = remaining if held is None else min(remaining, max(0.0, HELD_AT_MOST_S - held))
                try:
                    done, _ = await asyncio.wait(
                        waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    if arrival is not None:
                        arrival.cancel()
                if self._alarm is not None and self._alarm.done():
                    self._alarm = None
                await self._absorb(
                    cast(set[asyncio.Task[Any]], {task for task in done if task is not arrival})
                )
                held = self._run.staged_for()
                if held is not None and held >= HELD_AT_MOST_S:
                    await self._run.flush()
        finally:
            cancelled.cancel()
            handover.cancel()
            if self._alarm is not None:
                self._alarm.cancel()
            for task in (*self._calls, *self._timers):
                task.cancel()
            for key in self._probes.values():  # probes that will never report
                self._context.health.release(key)
            for span in self._spans.values():  # calls abandoned by a cancellation or a hard limit
                span.set_attribute("raydag.abandoned", True)
                span.end()

    def _idle(self) -> bool:
        """Nothing in flight, due, resting (a ready node waiting for its tool's circuit) or still streaming in:
        unless a step makes something ready, the round has drained."""
        streaming = self._plan_changed is not None and self._run.state.plan_open
        return not (self._calls or self._timers or self._due or self._alarm is not None or streaming)

    async def _land_in_flight(self) -> None:
        """Wait for the calls in flight and record their outcomes; dispatch nothing new (a handover)."""
        while self._calls:
            done, _ = await asyncio.wait(set(self._calls), return_when=asyncio.FIRST_COMPLETED)
            await self._absorb(cast(set[asyncio.Task[Any]], done), retry=False)

    def _wake_in(self, seconds: float) -> None:
        """Run the round's loop again after ``seconds`` (the earliest of several requests wins)."""
        if self._alarm is not None and not self._alarm.done():
            return  # an alarm is set; it re-runs the loop, which asks again and sets the next one
        self._alarm = asyncio.create_task(asyncio.sleep(max(0.0, seconds)))

    def _health_key(self, tool: str) -> HealthKey:
        return (self._run.state.principal.tenant_id, tool)

    def _admit(self, node_id: str, tool: str) -> bool:
        """Whether the tool's circuit lets this call go now; if not, the round wakes when it might."""
        key = self._health_key(tool)
        admission = self._context.health.admit(key, time.monotonic())
        match admission:
            case WaitFor(seconds=seconds):
                self._wake_in(seconds)
                return False
            case Go(probe=probe):
                if probe:
                    self._probes[node_id] = key
                return True
            case unexpected:
                assert_never(unexpected)

    async def _resume_in_flight(self) -> None:
        """Calls recorded as in flight have no task in this process (a recovered run): dispatch them again.

        They are read-only, so running them twice is safe; the lost attempt is closed in the ledger first.
        """
        lost = NodeError(
            kind=ErrorKind.TRANSIENT,
            code=RuntimeFailure.SUPERVISOR_RECOVERED,
            message="the supervisor that dispatched this call stopped before recording its outcome",
        )
        running = [node for node in self._run.state.in_flight() if node.status is NodeStatus.RUNNING]
        await self._run.record(
            *(
                NodeRetryScheduled(
                    at=now(), node_id=node.node_id, attempt=node.attempts, error=lost, delay_s=0.0
                )
                for node in running
            )
        )
        self._due.extend(node.node_id for node in self._run.state.in_flight())

    async def _step(self) -> Interruption | bool:
        """Record and perform every step that can be taken now; ``True`` if anything happened."""
        if self._due:  # a retry is dispatched on the recorded state
            await self._record_landed()
        retried = await self._retry_due()
        if isinstance(retried, Interruption):
            return retried
        state = self._run.state
        events: list[RunEvent] = self._landed  # what landed is recorded with what it makes ready
        self._landed = []
        for event in events:
            state = apply(state, event)
        context = self._context
        authority = context.authority(state)
        calls: list[tuple[ToolCall, ToolContract]] = []
        dispatching: set[str] = set()
        decided: Counter[str] = Counter()  # proposals decided in this step, not yet in the state
        nodes = state.node_count()
        capacity = state.budgets.max_parallel - len(self._calls)
        at = now()
        for candidate in self._frontier.candidates(state):
            if isinstance(candidate, Runnable) and capacity <= 0:
                continue  # max_parallel: not even resolved until a call lands
            step: Step = resolve(state, candidate.node_id) if isinstance(candidate, Runnable) else candidate
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
                        state.budgets.check_expansion(nodes=nodes, fanout=step.count)
                    except BudgetExceeded as exc:
                        return await self._stop(
                            events, Interruption(STOP_REASON_OF_BUDGET[exc.budget], f"{step.node_id}: {exc}")
                        )
                    nodes += step.count
                    events.append(NodeExpanded(at=at, node_id=step.node_id, count=step.count))
                case Ready():
                    withdrawn = context.withdrawal(step.tool, state.tool_pins)
                    if withdrawn is not None:
                        decided[step.fingerprint] += 1
                        events.append(
                            NodeDenied(
                                at=at,
                                node_id=step.node_id,
                                tool=step.tool,
                                args=step.args,
                                fingerprint=step.fingerprint,
                                decision=withdrawn.decision,
                            )
                        )
                        return await self._stop(
                            events,
                            Interruption(withdrawn.stop_reason, f"{step.node_id}: {withdrawn.detail}"),
                        )
                    contract = context.catalogue.get(step.tool)
                    problem = check_arguments(contract, step.args) if contract is not None else None
                    if problem is not None:
                        error = NodeError(kind=ErrorKind.CONTRACT, code="INVALID_ARGUMENTS", message=problem)
                        events.append(NodeFailed(at=at, node_id=step.node_id, error=error))
                        continue
                    decision = authorize(authority, context.catalogue, step.tool, step.args, self._observed)
                    common: dict[str, Any] = {
                        "at": at,
                        "node_id": step.node_id,
                        "tool": step.tool,
                        "args": step.args,
                        "fingerprint": step.fingerprint,
                    }
                    if not decision.allowed:
                        decided[step.fingerprint] += 1
                        events.append(NodeDenied(**common, decision=decision))
                        continue
                    assert contract is not None
                    verdict = gate(state, step.fingerprint, dispatching=dispatching, decided=decided)
                    if not isinstance(verdict, Wait | RepeatLimit):
                        decided[step.fingerprint] += 1
                    match verdict:
                        case Wait():
                            continue
                        case RepeatLimit() as limit:
                            return await self._stop(
                                events,
                                Interruption(
                                    StopReason.REPEATED_ACTION_FINGERPRINT,
                                    f"{step.node_id}: {step.tool} with these arguments was proposed "
                                    f"{limit.proposals} times (limit {limit.limit})",
                                ),
                            )
                        case Reuse() as reuse:
                            events.append(NodeReused(**common, source_node_id=reuse.source_node_id))
                        case AlreadyFailed() as failed:
                            error = NodeError(
                                kind=ErrorKind.BUSINESS,
                                code="IDENTICAL_ACTION_FAILED",
                                message=f"the identical action of {failed.source_node_id!r} already ran and failed",
                            )
                            events.append(NodeFailed(at=at, node_id=step.node_id, error=error))
                        case Dispatch():
                            if capacity <= 0:
                                continue  # max_parallel: it stays pending until a call lands
                            if not self._admit(step.node_id, step.tool):
                                continue  # the tool is resting: it stays pending until its circuit lets it
                            capacity -= 1
                            dispatching.add(step.fingerprint)
                            events.append(NodeDispatched(**common, attempt=1, decision=decision))
                            calls.append(
                                (
                                    self._call_for(
                                        state, step.node_id, step.tool, step.args, 1, step.fingerprint
                                    ),
                                    contract,
                                )
                            )
                        case unexpected:
                            assert_never(unexpected)
                case _:
                    assert_never(step)
        if not events:
            return retried
        if calls:
            await self._run.record(*events)
        else:  # nothing starts: stored with the next dispatch, the round's end, or after HELD_AT_MOST_S
            await self._run.stage(*events)
        for call, contract in calls:
            self._start(call, contract)
        return True

    async def _record_landed(self) -> None:
        events, self._landed = self._landed, []
        await self._run.record(*events)

    async def _stop(self, events: list[RunEvent], interruption: Interruption) -> Interruption:
        """A hard limit tripped mid-step: keep what was decided, but start nothing new."""
        await self._run.record(*(event for event in events if not isinstance(event, NodeDispatched)))
        return interruption

    async def _absorb(self, done: set[asyncio.Task[Any]], *, retry: bool = True) -> None:
        """Record what finished: results, failures and scheduled retries; queue retries whose wait is over.

        With ``retry=False`` (a handover) retries are recorded as scheduled but not timed: the supervisor that
        resumes the run dispatches them."""
        events: list[RunEvent] = []
        timers: list[tuple[str, float]] = []
        for task in done:
            if task in self._calls:
                node_id = self._calls.pop(task)
                event = self._completion(node_id, task.result())
                events.append(event)
                if isinstance(event, NodeRetryScheduled):
                    timers.append((node_id, event.delay_s))
            elif task in self._timers:
                self._due.append(self._timers.pop(task))
        if retry and not timers:
            self._landed.extend(events)  # recorded by the next step, before anything acts on them
            return
        await self._run.record(*self._landed, *events)
        self._landed = []
        if not retry:
            return
        for node_id, delay in timers:
            self._timers[asyncio.create_task(asyncio.sleep(delay))] = node_id

    async def _retry_due(self) -> Interruption | bool:
        """Dispatch due retries, oldest first, while ``max_parallel`` leaves room and their tools' circuits let
        them through; ``True`` if any moved, the interruption if one's tool was withdrawn."""
        moved = False
        resting: list[str] = []
        while self._due and len(self._calls) < self._run.state.budgets.max_parallel:
            node_id = self._due.pop(0)
            if not self._admit(node_id, self._run.state.nodes[node_id].tool):
                resting.append(node_id)
                continue
            interruption = await self._redispatch(node_id)
            if interruption is not None:
                self._due[:0] = resting
                return interruption
            moved = True
        self._due[:0] = resting  # still first in line once their tool is back
        return moved

    def _completion(self, node_id: str, outcome: ToolOutcome) -> RunEvent:
        state = self._run.state
        node = state.nodes[node_id]
        contract = self._context.catalogue[node.tool]
        error = outcome.error
        key = self._health_key(node.tool)
        health = self._context.health
        health.record(key, error, time.monotonic())
        self._probes.pop(node_id, None)
        span = self._spans.pop(node_id, None)
        if span is not None:
            if error is not None:
                span.set_attribute("raydag.error_kind", error.kind.value)
                span.set_attribute("raydag.error_code", error.code)
                span.set_status(Status(StatusCode.ERROR, error.code))
            span.end()
        times = {"started_at": outcome.started_at, "finished_at": outcome.finished_at}
        if error is None:
            found = observed_values([outcome.output], self._observed_fields)
            self._observed = {
                name: self._observed.get(name, frozenset()) | values for name, values in found.items()
            }
            return NodeSucceeded(at=now(), node_id=node_id, output=outcome.output, **times)
        if error.runtime_failure:
            self._runtime_failures[node_id] += 1
        elif not (counts_against_tool(error) and health.is_open(key)):
            self._tool_failures[node_id] += (
                1  # a tool in an outage: the wait is the circuit's, not an attempt
            )
        remaining = (self._deadline - now()).total_seconds()
        delay = self._context.retry.next_delay(
            contract,
            error,
            attempt=self._tool_failures[node_id],
            runtime_failures=self._runtime_failures[node_id],
            remaining_s=remaining,
            rng=self._context.rng,
        )
        if delay is None:
            return NodeFailed(at=now(), node_id=node_id, error=error, **times)
        return NodeRetryScheduled(
            at=now(), node_id=node_id, attempt=node.attempts, error=error, delay_s=round(delay, 3), **times
        )

    async def _redispatch(self, node_id: str) -> Interruption | None:
        """A retry is a new dispatch: authorized again, with a token of its own. A tool withdrawn meanwhile
        stops the round, as a fresh dispatch of it would."""
        state = self._run.state
        node = state.nodes[node_id]
        assert node.args is not None
        assert node.fingerprint is not None
        withdrawn = self._context.withdrawal(node.tool, state.tool_pins)
        decision: Decision = (
            withdrawn.decision
            if withdrawn is not None
            else authorize(
                self._context.authority(state), self._context.catalogue, node.tool, node.args, self._observed
            )
        )
        if not decision.allowed:
            error = NodeError(kind=ErrorKind.AUTHORIZATION, code=decision.rule_id, message=decision.reason)
            await self._run.record(NodeFailed(at=now(), node_id=node_id, error=error))
            if withdrawn is not None:
                return Interruption(withdrawn.stop_reason, f"{node_id}: {withdrawn.detail}")
            return None
        attempt = node.attempts + 1
        await self._run.record(
            NodeDispatched(
                at=now(),
                node_id=node_id,
                tool=node.tool,
                args=dict(node.args),
                fingerprint=node.fingerprint,
                attempt=attempt,
                decision=decision,
            )
        )
        self._start(
            self._call_for(state, node_id, node.tool, dict(node.args), attempt, node.fingerprint),
            self._context.catalogue[node.tool],
        )
        return None

    def _call_for(
        self, state: RunState, node_id: str, tool: str, args: dict[str, Any], attempt: int, fingerprint: str
    ) -> ToolCall:
        contract = self._context.catalogue[tool]
        url, tokens = self._context.destination(contract)
        token = (
            tokens.mint(
                subject=state.principal.subject,
                tenant_id=state.principal.tenant_id,
                task_id=f"{state.run_id}/{node_id}/{attempt}",
                resource=state.resource,
                scopes={contract.scope},
                tool=tool,
            )
            if tokens is not None
            else ""
        )
        span = tracer().start_span(
            f"node {node_id}",
            attributes={
                "raydag.run_id": state.run_id,
                "raydag.node_id": node_id,
                "raydag.tool": tool,
                "raydag.attempt": attempt,
                "raydag.fingerprint": fingerprint,
            },
        )
        self._spans[node_id] = span
        return ToolCall(
            trace=carrier(span),
            run_id=state.run_id,
            node_id=node_id,
            attempt=attempt,
            tool=tool,
            args=args,
            mcp_url=url,
            token=token,
            timeout_s=contract.timeout_s,
            protocol=self._context.protocol,
            server=contract.server,
        )

    def _start(self, call: ToolCall, contract: ToolContract) -> None:
        self._calls[asyncio.create_task(self._guarded(call, contract))] = call.node_id

    async def _guarded(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """The supervisor's own limit on a call: a task never scheduled must not hang the run."""
        started = now()
        try:
            async with asyncio.timeout(contract.timeout_s + self._context.call_slack_s):
                return await self._context.executor.run(call)
        except TimeoutError:
            error = NodeError(
                kind=ErrorKind.TRANSIENT,
                code="TIMEOUT",
                message=f"no result within {contract.timeout_s + self._context.call_slack_s:g}s",
            )
            return ToolOutcome(output=None, error=error, started_at=started, finished_at=now())

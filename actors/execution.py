"""One plan round, executed: nodes dispatched the moment they are ready, retried, timed out, limited, cancelled.

The decisions come from ``dag``: the scheduler (what is ready), the policy (may it run), the gate (has it
run), the budget (must we stop), the retry policy (try again?) and the circuit breaker (is the tool well).
This module performs them and records each transition before acting on it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any, assert_never, cast

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from actors.executor import ToolExecutor
from actors.mcp_client import ToolCall, ToolOutcome
from actors.recording import RunRecorder, now
from actors.tracing import carrier, tracer
from dag.budget import STOP_REASON_OF_BUDGET
from dag.contracts import ToolCatalogue, ToolContract
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
)
from dag.gate import AlreadyFailed, Dispatch, RepeatLimit, Reuse, Wait, gate
from dag.health import ToolHealth
from dag.policy import Decision, RunAuthority, authorize, observed_values
from dag.retry import RetryPolicy
from dag.run_state import RunState
from dag.scheduler import Expand, Ready, Settle, Skip, Unresolvable, next_steps
from dag.states import NodeStatus, StopReason
from dag.validate import check_arguments
from mcp_server.tokens import TaskTokens


@dataclass(frozen=True)
class Interruption:
    """Why a round ended before its DAG drained."""

    reason: StopReason
    detail: str


@dataclass
class ExecutionContext:
    """What every round of every run shares: how to call tools, and the judges of failure."""

    executor: ToolExecutor
    catalogue: ToolCatalogue
    tokens: TaskTokens
    mcp_url: str
    protocol: str
    health: ToolHealth
    retry: RetryPolicy
    rng: random.Random
    call_slack_s: float = 5.0
    """How long past a tool's timeout a call may take (queueing for a worker) before the supervisor gives up."""

    def authority(self, state: RunState) -> RunAuthority:
        return dataclasses.replace(state.authority, unhealthy=self.health.unhealthy(time.monotonic()))

    def observed_fields(self) -> frozenset[str]:
        return frozenset().union(*(contract.observed_bound for contract in self.catalogue.values()))


class RoundExecution:
    def __init__(
        self,
        run: RunRecorder,
        context: ExecutionContext,
        cancel: asyncio.Event,
        deadline: datetime,
        plan_changed: asyncio.Event | None = None,
    ) -> None:
        """``plan_changed`` is set whenever a streamed plan gains a node or ends: the round dispatches the new
        node at once, and cannot drain while the plan is still open."""
        self._run = run
        self._context = context
        self._plan_changed = plan_changed
        self._cancel = cancel
        self._deadline = deadline
        self._calls: dict[asyncio.Task[ToolOutcome], str] = {}
        self._spans: dict[str, trace.Span] = {}
        """The span of each node's attempt in flight, ended when its outcome is recorded."""
        self._timers: dict[asyncio.Task[None], str] = {}
        self._due: list[str] = []
        """Retries whose backoff has passed, waiting for a free slot under ``max_parallel``."""
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
        try:
            await self._resume_in_flight()
            while True:
                if self._cancel.is_set():
                    return Interruption(StopReason.CANCELLED, "the run was cancelled")
                remaining = (self._deadline - now()).total_seconds()
                if remaining <= 0:
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
                streaming = self._plan_changed is not None and self._run.state.plan_open
                if not self._calls and not self._timers and not self._due and not streaming:
                    return None
                waiting: set[asyncio.Future[Any]] = {*self._calls, *self._timers, cancelled}
                arrival = None
                if streaming:
                    assert self._plan_changed is not None
                    arrival = asyncio.ensure_future(self._plan_changed.wait())
                    waiting.add(arrival)
                try:
                    done, _ = await asyncio.wait(
                        waiting, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    if arrival is not None:
                        arrival.cancel()
                await self._absorb(
                    cast(set[asyncio.Task[Any]], {task for task in done if task is not arrival})
                )
        finally:
            cancelled.cancel()
            for task in (*self._calls, *self._timers):
                task.cancel()
            for span in self._spans.values():  # calls abandoned by a cancellation or a hard limit
                span.set_attribute("raydag.abandoned", True)
                span.end()

    async def _resume_in_flight(self) -> None:
        """Calls recorded as in flight have no task in this process (a recovered run): dispatch them again.

        They are read-only, so running them twice is safe; the lost attempt is closed in the ledger first.
        """
        lost = NodeError(
            kind=ErrorKind.TRANSIENT,
            code="SUPERVISOR_RECOVERED",
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
        retried = await self._retry_due()
        state = self._run.state
        context = self._context
        authority = context.authority(state)
        events: list[RunEvent] = []
        calls: list[tuple[ToolCall, ToolContract]] = []
        dispatching: set[str] = set()
        decided: Counter[str] = Counter()  # proposals decided in this step, not yet in the state
        nodes = state.node_count()
        capacity = state.budgets.max_parallel - len(self._calls)
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
                        state.budgets.check_expansion(nodes=nodes, fanout=step.count)
                    except BudgetExceeded as exc:
                        return await self._stop(
                            events, Interruption(STOP_REASON_OF_BUDGET[exc.budget], f"{step.node_id}: {exc}")
                        )
                    nodes += step.count
                    events.append(NodeExpanded(at=at, node_id=step.node_id, count=step.count))
                case Ready():
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
        await self._run.record(*events)
        for call, contract in calls:
            self._start(call, contract)
        return True

    async def _stop(self, events: list[RunEvent], interruption: Interruption) -> Interruption:
        """A hard limit tripped mid-step: keep what was decided, but start nothing new."""
        await self._run.record(*(event for event in events if not isinstance(event, NodeDispatched)))
        return interruption

    async def _absorb(self, done: set[asyncio.Task[Any]]) -> None:
        """Record what finished: results, failures and scheduled retries; queue retries whose wait is over."""
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
        await self._run.record(*events)
        for node_id, delay in timers:
            self._timers[asyncio.create_task(asyncio.sleep(delay))] = node_id

    async def _retry_due(self) -> bool:
        """Dispatch due retries, oldest first, while ``max_parallel`` leaves room; ``True`` if any moved."""
        moved = False
        while self._due and len(self._calls) < self._run.state.budgets.max_parallel:
            await self._redispatch(self._due.pop(0))
            moved = True
        return moved

    def _completion(self, node_id: str, outcome: ToolOutcome) -> RunEvent:
        state = self._run.state
        node = state.nodes[node_id]
        contract = self._context.catalogue[node.tool]
        error = outcome.error
        self._context.health.record(node.tool, error.kind if error else None, time.monotonic())
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
        remaining = (self._deadline - now()).total_seconds()
        delay = self._context.retry.next_delay(
            contract, error, attempt=node.attempts, remaining_s=remaining, rng=self._context.rng
        )
        if delay is None:
            return NodeFailed(at=now(), node_id=node_id, error=error, **times)
        return NodeRetryScheduled(
            at=now(), node_id=node_id, attempt=node.attempts, error=error, delay_s=round(delay, 3), **times
        )

    async def _redispatch(self, node_id: str) -> None:
        """A retry is a new dispatch: authorized again, with a token of its own."""
        state = self._run.state
        node = state.nodes[node_id]
        assert node.args is not None
        assert node.fingerprint is not None
        decision: Decision = authorize(
            self._context.authority(state), self._context.catalogue, node.tool, node.args, self._observed
        )
        if not decision.allowed:
            error = NodeError(kind=ErrorKind.AUTHORIZATION, code=decision.rule_id, message=decision.reason)
            await self._run.record(NodeFailed(at=now(), node_id=node_id, error=error))
            return
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

    def _call_for(
        self, state: RunState, node_id: str, tool: str, args: dict[str, Any], attempt: int, fingerprint: str
    ) -> ToolCall:
        contract = self._context.catalogue[tool]
        token = self._context.tokens.mint(
            subject=state.principal.subject,
            tenant_id=state.principal.tenant_id,
            task_id=f"{state.run_id}/{node_id}/{attempt}",
            case_id=state.case_id,
            scopes={contract.scope},
            tool=tool,
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
            mcp_url=self._context.mcp_url,
            token=token,
            timeout_s=contract.timeout_s,
            protocol=self._context.protocol,
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

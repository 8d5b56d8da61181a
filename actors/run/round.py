"""One plan round, executed: nodes dispatched the moment they are ready, retried, timed out, limited, cancelled.

What to do with each ready node and each retry that is due is ``dag.dispatch``'s decision, a list of steps;
this module records them, each before it is acted on, starts the calls they ask for, and keeps the round's
clocks: the deadline, retry backoffs, a resting tool's wake-up.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, assert_never, cast

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from actors.calls.call import TaskHandle, ToolCall, ToolOutcome
from actors.observe.tracing import carrier, tracer
from actors.run.children import ChildRuns
from actors.run.context import CANCELLED, Cancel, HandedOver, Interruption, Parked
from actors.run.deps import RunDeps
from actors.run.operate import CallTool, Operate
from actors.run.pending_writes import PendingWrites
from actors.run.recorder import RunRecorder, now
from actors.run.tool_questions import ToolQuestionGate
from actors.store.ownership import LeaseLost
from dag.agents import AgentRefusal, AgentRefused, AwaitSiblings, StartAgent, start_agent
from dag.contracts import ToolContract
from dag.dispatch import (
    AwaitIdentical,
    Call,
    Deny,
    Fail,
    HoldForCapacity,
    HoldForCircuit,
    Probe,
    ReuseOutput,
    Stop,
    dispatch,
    past_deadline,
    retries,
)
from dag.events import (
    AgentEnded,
    AgentStarted,
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
    NodeTaskUpdated,
    RunEvent,
    RuntimeFailure,
)
from dag.health import HealthKey, counts_against_tool
from dag.policy import effective_tools, observed_values
from dag.run_state import RunState, apply
from dag.scheduler import Expand, Frontier, Ready, Settle, Skip
from dag.states import NodeStatus

HELD_AT_MOST_S = 0.05
"""How long what a round decided and nothing acts on yet (outcomes that make no node ready while other calls
are out) waits to be stored with the next append. A wide layer's outcomes land a few at a time; one append each
was several appends the layer's last outcome queued behind. It is stored before anything acts on it, with the
next dispatch or the round's end, or after this long, so that a run's events lag its calls by no more."""


class RoundExecution:
    def __init__(
        self,
        run: RunRecorder,
        deps: RunDeps,
        cancel: Cancel,
        deadline: datetime,
        plan_changed: asyncio.Event | None = None,
        handover: asyncio.Event | None = None,
        *,
        operate: Operate | None = None,
        questions: ToolQuestionGate | None = None,
        children: ChildRuns | None = None,
    ) -> None:
        """``plan_changed`` is set whenever a streamed plan gains a node or ends: the round dispatches the new
        node at once, and cannot drain while the plan is still open. ``handover`` is set when the supervisor
        shuts down: nothing more is dispatched, the calls in flight land and are recorded, and the round
        raises ``HandedOver``. ``operate`` drives a write node through its operation's row (``None``: no
        ledger, so no write is called); ``questions`` puts a task's question to a person (``None``: nobody can
        answer, so each is declined); ``children`` runs agent nodes' child runs (``None``: an agent node fails,
        as nothing would drive its child)."""
        self._run = run
        self._children = children
        self._agents: dict[str, str] = {}
        """Agent nodes in flight → their child run: each waits on it, and lets it go on a handover."""
        self._agent_ends: dict[str, AgentEnded] = {}
        """What each agent node's child run spent, recorded with the node's outcome."""
        self._parked_children: set[str] = set()
        """Agent nodes in flight whose child run was last read parked: waiting for people, as a write may."""
        self._children_news = asyncio.Event()
        """Set when an agent node's child run is read parked, or no longer: whether the round may park follows."""
        self._deps = deps
        self._handover = handover if handover is not None else asyncio.Event()
        self._stopped: Interruption | None = None
        """Why the round stopped the run, once it did: its child runs stop for the same reason."""
        self._let_go = asyncio.Event()
        """Set once the round stops driving the run while the run goes on elsewhere: the supervisor hands it
        over, or another took its lease (its driver cancelled, or an append refused). The tasks it follows,
        their questions, its writes' tasks and its child runs are then let go as recorded, for the run's owner
        to take up; only the run's own stop (an ``Interruption``: cancelled, its deadline) stops them."""
        self._writes = PendingWrites(run, operate, self._let_go)
        """The round's writes that have not ended: the run's status, parking and expiry follow them."""
        self._plan_changed = plan_changed
        self._cancel = cancel
        self._deadline = deadline
        self._calls: dict[asyncio.Task[ToolOutcome], str] = {}
        self._spans: dict[str, trace.Span] = {}
        """The span of each node's attempt in flight, ended when its outcome is recorded."""
        self._questions = questions
        self._asking: set[str] = set()
        """Nodes whose task's question waits for a person: letting the run go leaves them waiting, as a
        write's."""
        self._following: set[str] = set()
        """Nodes whose task is being followed (a read's, or a write's through its operation): letting the run
        go lets them go, and never stops their task."""
        self._sent: dict[str, ToolCall] = {}
        """The call of each read node in flight: a task it started is followed with it."""
        self._followed_with: dict[str, ToolCall] = {}
        """Each read node whose task is to be followed and whose follow has not reached the executor yet, with
        its follow's call: a round that stops asks the server to stop these tasks (``_stop_followed``)."""
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
        fields = deps.observed_fields()
        state = run.state
        self._observed_fields = fields
        self._observed = observed_values(
            (node.output for node in state.nodes.values() if node.status.has_output and not node.is_group),
            fields,
        )

    def _observe(self, output: Any) -> None:
        """Add the values ``output`` shows to those later nodes' observed-bound arguments may name."""
        found = observed_values([output], self._observed_fields)
        self._observed = {
            name: self._observed.get(name, frozenset()) | values for name, values in found.items()
        }

    async def run(self) -> Interruption | None:
        """Execute until nothing more can run; ``None`` when the round drained, else why it stopped (and then
        every task a read was followed in is asked to stop: nothing of this run goes on at a server)."""
        interruption = await self._execute()
        if interruption is not None:
            await self._stop_followed()
        return interruption

    async def _execute(self) -> Interruption | None:
        cancelled = asyncio.create_task(self._cancel.wait())
        handover = asyncio.create_task(self._handover.wait())
        try:
            self._stopped = await self._drive(cancelled, handover)
            return self._stopped
        except (asyncio.CancelledError, LeaseLost, HandedOver, Parked):
            self._let_go.set()  # the run goes on elsewhere (or later), and so does what it waits on
            raise
        finally:
            cancelled.cancel()
            handover.cancel()
            if self._alarm is not None:
                self._alarm.cancel()
            for task in (*self._calls, *self._timers):
                task.cancel()
            if not self._let_go.is_set() and self._children is not None:  # the run stops: so do its children,
                stopped = self._stopped or CANCELLED  # for its reason (a woken parent's too, not yet waiting)
                for child_run_id in self._agents.values():
                    self._children.cancel_soon(child_run_id, self._run.state.run_id, stopped)
            for key in self._probes.values():  # probes that will never report
                self._deps.health.release(key)
            for span in self._spans.values():  # calls abandoned by a cancellation or a hard limit
                span.set_attribute("raydag.abandoned", True)
                span.end()

    async def _drive(self, cancelled: asyncio.Task[Any], handover: asyncio.Task[Any]) -> Interruption | None:
        """Dispatch, wait and record until the round drains (``None``) or stops, and why."""
        await self._resume_in_flight()
        while True:
            if self._cancel.is_set():
                await self._record_landed()
                await self._writes.expire(None)
                return self._cancel.interruption
            if self._handover.is_set():
                self._let_go.set()
                await self._record_landed()
                await self._land_in_flight()
                await self._run.flush()
                raise HandedOver(f"run {self._run.state.run_id} handed over by a stopping supervisor")
            at = now()
            remaining = (self._deadline - at).total_seconds()
            late = past_deadline(self._run.state, at)
            if late is not None:
                await self._record_landed()
                return await self._writes.expire(Interruption(late.reason, late.detail))
            if self._writes.expired is not None:
                await self._record_landed()
                return self._writes.expired
            await self._writes.follow()
            if self._plan_changed is not None:
                self._plan_changed.clear()  # before the scheduler looks, so no arrival goes unseen
            progress = await self._step()
            if isinstance(progress, Interruption):
                return progress
            if progress:
                continue
            if self._idle():
                return None
            self._children_news.clear()
            if self._parkable():
                await self._park()
            streaming = self._plan_changed is not None and self._run.state.plan_open
            attention = asyncio.ensure_future(self._writes.attention.wait())
            children = asyncio.ensure_future(self._children_news.wait())
            waiting: set[asyncio.Future[Any]] = {
                *self._calls,
                *self._timers,
                cancelled,
                handover,
                attention,
                children,
            }
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
                done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                attention.cancel()
                children.cancel()
                if arrival is not None:
                    arrival.cancel()
            if self._alarm is not None and self._alarm.done():
                self._alarm = None
            await self._absorb(
                cast(
                    set[asyncio.Task[Any]],
                    {task for task in done if task not in (arrival, attention, children)},
                )
            )
            held = self._run.staged_for()
            if held is not None and held >= HELD_AT_MOST_S:
                await self._run.flush()

    def _idle(self) -> bool:
        """Nothing in flight, due, resting (a ready node waiting for its tool's circuit) or still streaming in:
        unless a step makes something ready, the round has drained."""
        streaming = self._plan_changed is not None and self._run.state.plan_open
        return not (self._calls or self._timers or self._due or self._alarm is not None or streaming)

    async def _land_in_flight(self) -> None:
        """Wait for the calls in flight and record their outcomes; dispatch nothing new (a handover).

        A write waiting for a person is not a call in flight, nor is a task being followed (a read's, or a
        write's) or a task's question: each is let go here, as its log and its operation's row recorded it, and
        the supervisor that resumes the run waits on, or follows the same task."""
        while self._calls:
            let_go = self._writes.waiting_nodes() | self._asking | self._following | set(self._agents)
            for task, node_id in list(self._calls.items()):
                if node_id in let_go:
                    task.cancel()
                    del self._calls[task]
            if not self._calls:
                return
            # a write's operation may start following its task meanwhile: looked at again shortly
            done, _ = await asyncio.wait(set(self._calls), timeout=0.1, return_when=asyncio.FIRST_COMPLETED)
            if done:
                await self._absorb(cast(set[asyncio.Task[Any]], done), retry=False)

    def _parkable(self) -> bool:
        """Whether the round has nothing left to do but wait for people: every call out is a write waiting for
        a person alone or an agent node whose child run is parked, nothing is due, resting or streaming in, and
        every write taken up again has said so."""
        if not self._calls or self._landed or self._due or self._timers:
            return False
        if self._alarm is not None or (self._plan_changed is not None and self._run.state.plan_open):
            return False
        return self._writes.parkable(set(self._calls.values()), self._parked_children)

    async def _park(self) -> None:
        """Let the waits go and park the run (``RunParked``): it holds nothing while people decide, and is
        woken by a decision, its first wait's deadline, or the end of a child run it waits on. Raises
        ``Parked``."""
        children = tuple(sorted(self._agents[node_id] for node_id in self._parked_children))
        self._let_go.set()
        self._writes.let_go()
        tasks = list(self._calls)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for node_id in self._calls.values():
            span = self._spans.pop(node_id, None)
            if span is not None:
                span.set_attribute("raydag.parked", True)
                span.end()
        self._calls.clear()
        await self._writes.park(children)

    def _wake_in(self, seconds: float) -> None:
        """Run the round's loop again after ``seconds`` (the earliest of several requests wins)."""
        if self._alarm is not None and not self._alarm.done():
            return  # an alarm is set; it re-runs the loop, which asks again and sets the next one
        self._alarm = asyncio.create_task(asyncio.sleep(max(0.0, seconds)))

    def _health_key(self, tool: str) -> HealthKey:
        return (self._run.state.principal.tenant_id, tool)

    async def _resume_in_flight(self) -> None:
        """Calls recorded as in flight have no task in this process (a recovered or woken run).

        A read is dispatched again (running it twice is safe; the lost attempt is closed in the ledger first).
        A write is never called again: its attempt goes on where its operation's row is (awaiting a person,
        approved, executing, unknown), in this process.
        """
        lost = NodeError(
            kind=ErrorKind.TRANSIENT,
            code=RuntimeFailure.SUPERVISOR_RECOVERED,
            message="the supervisor that dispatched this call stopped before recording its outcome",
        )
        state = self._run.state
        running = []
        for node in state.in_flight():
            if node.status is not NodeStatus.RUNNING:
                continue
            contract = self._deps.catalogue.get(node.tool)
            if state.spec_of(node).agent is not None:
                self._reattach(node.node_id)
            elif contract is not None and self._writes.operated(contract):
                self._take_up(node.node_id)
            elif contract is not None and node.task is not None:
                self._follow_recorded(node.node_id, contract)
            else:
                running.append(node)
        await self._run.record(
            *(
                NodeRetryScheduled(
                    at=now(), node_id=node.node_id, attempt=node.attempts, error=lost, delay_s=0.0
                )
                for node in running
            )
        )
        self._due.extend(
            node.node_id
            for node in self._run.state.in_flight()
            if not self._writes.unreported(node.node_id)
            and node.node_id not in self._sent
            and node.node_id not in self._agents
        )

    def _follow_recorded(self, node_id: str, contract: ToolContract) -> None:
        """Go on following the task a read node's attempt started, as its log recorded it: the tool is not
        called again (a task the server lost fails ``TASK_LOST``, and only then is the read made again)."""
        task = self._run.state.nodes[node_id].task
        assert task is not None
        self._sent[node_id] = self._call_for(self._run.state, self._recorded_step(node_id))
        self._follow(node_id, TaskHandle.of(task), contract)

    def _follow(self, node_id: str, task: TaskHandle, contract: ToolContract, after_s: float = 0.0) -> None:
        call = replace(self._sent[node_id], as_task=False, task=task)
        self._followed_with[node_id] = call
        work = (
            self._asked(call, contract)
            if task.question is not None
            else self._followed(call, contract, after_s)
        )
        self._calls[asyncio.create_task(work)] = node_id

    async def _followed(self, call: ToolCall, contract: ToolContract, after_s: float = 0.0) -> ToolOutcome:
        """One exchange following ``call``'s task, after ``after_s`` (its last follower died). Cancelled
        because the run stops, the follower asks the server to stop the task; cancelled as the run is let go
        (a handover, a lost lease), it is let go quietly (its handle is recorded, and the run's owner follows
        the same task)."""
        self._following.add(call.node_id)
        exchange = asyncio.ensure_future(self._follow_after(after_s, call, contract))
        try:
            return await asyncio.shield(exchange)
        except asyncio.CancelledError:
            if not self._let_go.is_set():
                exchange.cancel()
            raise
        finally:
            self._following.discard(call.node_id)

    async def _stop_followed(self) -> None:
        """Ask the server to stop each task whose follow the round's stop cancelled before the follow reached
        its executor (the stop came as the task's news was recorded): no follower is there to ask. A follow
        the executor had is stopped by it (the caller asks the server as its follow is cancelled, or a follow
        still queued goes as a stop). The stop is the task's own exchange, with a token minted for it."""
        followed, self._followed_with = self._followed_with, {}
        stops = [
            self._guarded(self._fresh(replace(call, stop=True, reply=None), contract), contract)
            for call in followed.values()
            if (contract := self._deps.catalogue.get(call.tool)) is not None
        ]
        await asyncio.gather(*stops)

    async def _follow_after(self, after_s: float, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """Follow ``call``'s task once ``after_s`` has passed (its follower's caller restarts meanwhile);
        stopped before then by the run's stop, the server is still asked to stop the task."""
        if after_s > 0:
            try:
                await asyncio.sleep(after_s)
            except asyncio.CancelledError:
                self._followed_with.pop(call.node_id, None)
                if not self._let_go.is_set():
                    await self._guarded(self._fresh(replace(call, stop=True), contract), contract)
                raise
        self._followed_with.pop(call.node_id, None)  # handed to the executor: stopped by it if cancelled now
        return await self._guarded(self._fresh(call, contract), contract)

    def _fresh(self, call: ToolCall, contract: ToolContract) -> ToolCall:
        """``call`` with a token minted now: a task is followed for longer than a token lives (60 s), and a
        server's question may wait hours for its answer; each exchange with the server carries its own."""
        return replace(call, token=self._token(self._run.state, call.node_id, call.attempt, contract))

    async def _asked(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """Follow ``call``'s task on once a person decided what it asks (``actors.run.tool_questions``); the
        round's other nodes go on meanwhile."""

        async def follow(
            task: TaskHandle, reply: Mapping[str, Any] | None, *, stop: bool = False
        ) -> ToolOutcome:
            return await self._guarded(
                self._fresh(replace(call, task=task, reply=reply, stop=stop), contract), contract
            )

        self._followed_with.pop(call.node_id, None)  # the question's settling stops the task if the run stops
        if self._questions is None:  # nobody can answer: declined, as the server's question documents
            assert call.task is not None
            return await follow(call.task, {"action": "decline"})
        self._asking.add(call.node_id)
        try:
            return await self._questions.settle(self._run, call, follow, let_go=self._let_go)
        finally:
            self._asking.discard(call.node_id)

    def _recorded_step(self, node_id: str) -> Call:
        """The call a node in flight was dispatched with, as its log recorded it."""
        node = self._run.state.nodes[node_id]
        assert node.args is not None, "a node in flight was dispatched with its arguments"
        assert node.fingerprint is not None
        assert node.decision is not None
        return Call(node_id, node.tool, dict(node.args), node.fingerprint, node.attempts, node.decision)

    def _take_up(self, node_id: str) -> None:
        """Go on with a write node's attempt recorded in flight: its operation, driven from its row."""
        state = self._run.state
        step = self._recorded_step(node_id)
        self._writes.take_up(node_id)
        self._start(self._call_for(state, step), self._deps.catalogue[step.tool], step)

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
        deps = self._deps
        at = now()  # the step's moment, stamped on what it decides (before deciding, as it always was)
        steps = dispatch(
            state,
            self._frontier.candidates(state),
            in_flight=len(self._calls),
            catalogue=deps.catalogue,
            withdrawal=deps.withdrawal,
            observed=self._observed,
            health=deps.health,
            now=time.monotonic(),
            at=at,
            agent_depth=deps.agent_depth,
        )
        calls: list[tuple[ToolCall, ToolContract, Call]] = []
        agents: list[tuple[StartAgent, str]] = []
        for step in steps:
            match step:
                case Skip():
                    events.append(NodeSkipped(at=at, node_id=step.node_id, cause_node_id=step.cause_node_id))
                case Settle():
                    events.append(GroupSettled(at=at, node_id=step.node_id, succeeded=step.succeeded))
                case Expand():
                    events.append(NodeExpanded(at=at, node_id=step.node_id, count=step.count))
                case Fail() | Deny():
                    events.append(_event_of(step, at))
                case ReuseOutput(ready=ready):
                    events.append(
                        NodeReused(
                            at=at,
                            node_id=ready.node_id,
                            tool=ready.tool,
                            args=ready.args,
                            fingerprint=ready.fingerprint,
                            source_node_id=step.source_node_id,
                            source_run_id=step.source_run_id,
                        )
                    )
                    carried = state.carried.get(ready.fingerprint) if step.source_run_id is not None else None
                    if (
                        carried is not None and carried.tool
                    ):  # an earlier run's read: this run sees it only now
                        self._observe(carried.output)  # (a child run's result is data, never observed)
                case Call():
                    events.append(_dispatched(step, at))
                    calls.append((self._call_for(state, step), deps.catalogue[step.tool], step))
                case StartAgent(ready=ready):
                    child_run_id = str(uuid.uuid4())  # named in the parent before the child exists
                    as_call = Call(ready.node_id, ready.tool, ready.args, ready.fingerprint, 1, step.decision)
                    events.append(_dispatched(as_call, at))
                    tokens, cost = step.reserved
                    events.append(
                        AgentStarted(
                            at=at,
                            node_id=ready.node_id,
                            child_run_id=child_run_id,
                            reserved_tokens=tokens,
                            reserved_cost_usd=cost,
                        )
                    )
                    agents.append((step, child_run_id))
                case Probe():
                    self._probes[step.node_id] = step.key
                case HoldForCircuit():
                    self._wake_in(step.seconds)  # it stays pending until its tool's circuit lets it
                case AwaitIdentical() | AwaitSiblings() | HoldForCapacity():
                    pass  # decided again when a call lands
                case Stop():
                    if step.last is not None:
                        events.append(_event_of(step.last, at))
                    return await self._stop(events, Interruption(step.reason, step.detail))
                case _:
                    assert_never(step)
        if not events:
            return retried
        if calls or agents:
            await self._run.record(*events)
        else:  # nothing starts: stored with the next dispatch, the round's end, or after HELD_AT_MOST_S
            await self._run.stage(*events)
        for call, contract, step in calls:
            self._start(call, contract, step)
        for start, child_run_id in agents:
            self._start_agent(start.ready.node_id, child_run_id, start)
        return True

    # ---------------------------------------------------------------- agent nodes: child runs

    def _start_agent(self, node_id: str, child_run_id: str, start: StartAgent | NodeError) -> None:
        """Wait on the agent node's child run (``ChildRuns`` creates it first if it does not exist yet)."""
        span = tracer().start_span(
            f"node {node_id}",
            attributes={
                "raydag.run_id": self._run.state.run_id,
                "raydag.node_id": node_id,
                "raydag.child_run_id": child_run_id,
            },
        )
        self._spans[node_id] = span
        self._agents[node_id] = child_run_id
        work = self._agent(node_id, child_run_id, start, carrier(span))
        self._calls[asyncio.create_task(work)] = node_id

    def _reattach(self, node_id: str) -> None:
        """An agent node recorded in flight (a recovered run): wait on the child run its log names, never a
        second one. Should the child not exist (the supervisor died between naming and creating it), it is
        created now, its budgets carved from what the parent has left now."""
        state = self._run.state
        node = state.nodes[node_id]
        agent = state.spec_of(node).agent
        assert agent is not None
        assert node.args is not None
        assert node.fingerprint is not None
        if node.child_run_id is None:  # named in the same append as its dispatch: cannot happen
            raise AssertionError(f"agent node {node_id} in flight names no child run")
        ready = Ready(node_id, node.tool, dict(node.args), node.fingerprint)
        offered = effective_tools(state.authority, self._deps.catalogue)
        start = start_agent(state, ready, agent, offered, depth_limit=self._deps.agent_depth, at=now())
        if isinstance(start, AwaitSiblings):  # named, never created: it cannot wait as if not started
            start = AgentRefused(
                AgentRefusal.NOTHING_LEFT, "the parent's tokens and cost are held by its other child runs"
            ).node_error()
        self._start_agent(node_id, node.child_run_id, start)

    async def _agent(
        self, node_id: str, child_run_id: str, start: StartAgent | NodeError, trace: Mapping[str, str]
    ) -> ToolOutcome:
        """The agent node's outcome: its child run's bounded result, or its failure. The round that stops the
        parent cancels its child (``_execute``); one that lets the parent go (a handover, a lost lease, parked)
        lets the child go on (the supervisor that resumes or wakes the parent attaches to it)."""
        if self._children is None:
            error = NodeError(
                kind=ErrorKind.CONTRACT,
                code="AGENT_NODES_UNAVAILABLE",
                message="this supervisor runs no agent nodes",
            )
            return ToolOutcome(output=None, error=error, started_at=now(), finished_at=now())
        end = await self._children.run(
            self._run.state,
            node_id,
            child_run_id,
            start,
            trace=dict(trace),
            parked=lambda parked: self._child_parked(node_id, parked),
        )
        if end.ended is not None:
            self._agent_ends[node_id] = end.ended
        return end.outcome

    def _child_parked(self, node_id: str, parked: bool) -> None:
        """``node_id``'s child run was read parked (or not): the round looks again at whether it may park."""
        if parked == (node_id in self._parked_children):
            return
        if parked:
            self._parked_children.add(node_id)
        else:
            self._parked_children.discard(node_id)
        self._children_news.set()

    def _agent_completion(self, node_id: str, outcome: ToolOutcome) -> list[RunEvent]:
        """What the parent records when its agent node's child run ended: the child's spend, then the node's
        outcome (no retry: a child run is not tried again)."""
        del self._agents[node_id]
        self._parked_children.discard(node_id)
        span = self._spans.pop(node_id, None)
        error = outcome.error
        if span is not None:
            if error is not None:
                span.set_attribute("raydag.error_code", error.code)
                span.set_status(Status(StatusCode.ERROR, error.code))
            span.end()
        events: list[RunEvent] = []
        ended = self._agent_ends.pop(node_id, None)
        if ended is not None:
            events.append(ended)
        times = {"started_at": outcome.started_at, "finished_at": outcome.finished_at}
        if error is None:  # data, not observed: a child's words never widen what the parent may name
            events.append(NodeSucceeded(at=now(), node_id=node_id, output=outcome.output, **times))
        else:
            events.append(NodeFailed(at=now(), node_id=node_id, error=error, **times))
        return events

    async def _record_landed(self) -> None:
        events, self._landed = self._landed, []
        await self._run.record(*events)

    async def _stop(self, events: list[RunEvent], interruption: Interruption) -> Interruption:
        """A hard limit tripped mid-step: keep what was decided, but start nothing new."""
        await self._run.record(
            *(event for event in events if not isinstance(event, NodeDispatched | AgentStarted))
        )
        return interruption

    async def _absorb(self, done: set[asyncio.Task[Any]], *, retry: bool = True) -> None:
        """Record what finished: results, failures and scheduled retries; queue retries whose wait is over.

        With ``retry=False`` (a handover) retries are recorded as scheduled but not timed: the supervisor that
        resumes the run dispatches them."""
        events: list[RunEvent] = []
        timers: list[tuple[str, float]] = []
        following: list[tuple[str, TaskHandle, float]] = []
        for task in done:
            if task in self._calls:
                node_id = self._calls.pop(task)
                self._followed_with.pop(node_id, None)
                outcome = task.result()
                if node_id in self._agents:
                    events.extend(self._agent_completion(node_id, outcome))
                    continue
                followed = self._task_of(node_id, outcome)
                if followed is not None:
                    following.append((node_id, *followed))
                    continue
                event = self._completion(node_id, outcome)
                events.append(event)
                if isinstance(event, NodeRetryScheduled):
                    timers.append((node_id, event.delay_s))
            elif task in self._timers:
                self._due.append(self._timers.pop(task))
        await self._follow_on(following)
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
        if not self._due:
            return False
        deps = self._deps
        steps = retries(
            self._run.state,
            self._due,
            in_flight=len(self._calls),
            catalogue=deps.catalogue,
            withdrawal=deps.withdrawal,
            observed=self._observed,
            health=deps.health,
            now=time.monotonic(),
        )
        moved = False
        resting: list[str] = []
        taken = 0
        for step in steps:
            match step:
                case Probe():
                    self._probes[step.node_id] = step.key
                    continue
                case HoldForCircuit():
                    resting.append(step.node_id)  # still first in line once its tool is back
                    self._wake_in(step.seconds)
                case Call():
                    await self._run.record(_dispatched(step, now()))
                    self._start(self._call_for(self._run.state, step), deps.catalogue[step.tool], step)
                    moved = True
                case Fail():
                    await self._run.record(_event_of(step, now()))
                    moved = True
                case Stop():
                    if step.last is not None:
                        await self._run.record(_event_of(step.last, now()))
                    self._due[: taken + 1] = resting
                    return Interruption(step.reason, step.detail)
                case _:
                    assert_never(step)
            taken += 1
        self._due[:taken] = resting
        return moved

    def _task_of(self, node_id: str, outcome: ToolOutcome) -> tuple[TaskHandle, float] | None:
        """The task to follow on instead of recording ``outcome``, and after how long: one the call started or
        reported on, at once, or the node's recorded task when the process following it died (a dead caller
        is not a lost task), after the retry policy's wait for a dead worker."""
        if outcome.pending:
            assert outcome.task is not None
            return outcome.task, 0.0
        recorded = self._run.state.nodes[node_id].task
        error = outcome.error
        if error is None or not error.runtime_failure or recorded is None:
            return None
        after_s = self._deps.retry.refollow_delay(self._runtime_failures[node_id] + 1, self._deps.rng)
        if after_s is None:  # its followers keep dying: recorded as the call's failure
            return None
        self._runtime_failures[node_id] += 1
        return TaskHandle.of(recorded), after_s

    async def _follow_on(self, following: list[tuple[str, TaskHandle, float]]) -> None:
        """Record each task's new handle or status (before anything waits on it), then follow each on."""
        state = self._run.state
        updates = [
            NodeTaskUpdated(
                at=now(), node_id=node_id, attempt=state.nodes[node_id].attempts, task=task.json()
            )
            for node_id, task, _ in following
            if state.nodes[node_id].task != task.json()
        ]
        if updates:
            await self._run.record(*updates)
        if self._handover.is_set():  # recorded: the supervisor that resumes the run follows them on
            return
        for node_id, task, after_s in following:
            self._follow(node_id, task, self._deps.catalogue[state.nodes[node_id].tool], after_s)

    def _completion(self, node_id: str, outcome: ToolOutcome) -> RunEvent:
        self._sent.pop(node_id, None)
        state = self._run.state
        node = state.nodes[node_id]
        contract = self._deps.catalogue[node.tool]
        error = outcome.error
        key = self._health_key(node.tool)
        health = self._deps.health
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
            self._observe(outcome.output)
            return NodeSucceeded(at=now(), node_id=node_id, output=outcome.output, **times)
        if contract.operation is not None:  # a write is never tried again: its operation said how it ended
            self._writes.ended(node_id, error)
            return NodeFailed(at=now(), node_id=node_id, error=error, **times)
        if error.runtime_failure:
            self._runtime_failures[node_id] += 1
        elif not (counts_against_tool(error) and health.is_open(key)):
            self._tool_failures[node_id] += (
                1  # a tool in an outage: the wait is the circuit's, not an attempt
            )
        remaining = (self._deadline - now()).total_seconds()
        delay = self._deps.retry.next_delay(
            contract,
            error,
            attempt=self._tool_failures[node_id],
            runtime_failures=self._runtime_failures[node_id],
            remaining_s=remaining,
            rng=self._deps.rng,
        )
        if delay is None:
            return NodeFailed(at=now(), node_id=node_id, error=error, **times)
        return NodeRetryScheduled(
            at=now(), node_id=node_id, attempt=node.attempts, error=error, delay_s=round(delay, 3), **times
        )

    def _token(self, state: RunState, node_id: str, attempt: int, contract: ToolContract) -> str:
        """The task token of one call of ``contract``'s tool for a node (empty: its server takes none)."""
        _, tokens = self._deps.destination(contract)
        if tokens is None:
            return ""
        return tokens.mint(
            subject=state.principal.subject,
            tenant_id=state.principal.tenant_id,
            task_id=f"{state.run_id}/{node_id}/{attempt}",
            resource=state.resource,
            scopes={contract.scope},
            tool=contract.name,
        )

    def _call_for(self, state: RunState, step: Call) -> ToolCall:
        contract = self._deps.catalogue[step.tool]
        url, _ = self._deps.destination(contract)
        token = self._token(state, step.node_id, step.attempt, contract)
        span = tracer().start_span(
            f"node {step.node_id}",
            attributes={
                "raydag.run_id": state.run_id,
                "raydag.node_id": step.node_id,
                "raydag.tool": step.tool,
                "raydag.attempt": step.attempt,
                "raydag.fingerprint": step.fingerprint,
            },
        )
        self._spans[step.node_id] = span
        return ToolCall(
            trace=carrier(span),
            run_id=state.run_id,
            node_id=step.node_id,
            attempt=step.attempt,
            tool=step.tool,
            args=step.args,
            mcp_url=url,
            token=token,
            timeout_s=contract.timeout_s,
            protocol=self._deps.protocol,
            server=contract.server,
            as_task=contract.task,
        )

    def _start(self, call: ToolCall, contract: ToolContract, step: Call) -> None:
        if self._writes.operated(contract):
            work = self._writes.drive(
                self._run.state,
                step,
                contract,
                call_limit_s=self._deps.call_limit_s(contract),
                call=self._write_call(call, contract),
                follow=lambda task, after_s: self._follow_write(call, contract, task, after_s),
            )
        else:
            self._sent[call.node_id] = call
            work = self._guarded(call, contract)
        self._calls[asyncio.create_task(work)] = call.node_id

    def _write_call(self, call: ToolCall, contract: ToolContract) -> CallTool:
        """How a write node's operation calls a tool (the write, or its reconciling read): as ``call`` was
        made, with that tool's token, time limit and server."""
        state = self._run.state

        async def call_tool(tool: str, args: dict[str, Any], meta: dict[str, Any]) -> ToolOutcome:
            used = self._deps.catalogue[tool]
            return await self._guarded(
                replace(
                    call,
                    tool=tool,
                    args=args,
                    meta=meta,
                    token=self._token(state, call.node_id, call.attempt, used),
                    timeout_s=used.timeout_s,
                    server=used.server,
                    as_task=used.task and tool == contract.name,  # a reconciling read is a plain call
                ),
                used,
            )

        return call_tool

    async def _follow_write(
        self, call: ToolCall, contract: ToolContract, task: TaskHandle, after_s: float
    ) -> ToolOutcome:
        """Follow the task a write node's call runs as (its operation recorded it first), after ``after_s``,
        its status recorded on the node as for a read."""
        node = self._run.state.nodes[call.node_id]
        if node.status is NodeStatus.RUNNING and node.task != task.json():
            await self._run.record(
                NodeTaskUpdated(at=now(), node_id=call.node_id, attempt=node.attempts, task=task.json())
            )
        following = replace(call, as_task=False, task=task)
        if task.question is not None:
            return await self._asked(following, contract)
        return await self._followed(following, contract, after_s)

    async def _guarded(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """The supervisor's own limit on a call: a task never scheduled must not hang the run."""
        started = now()
        try:
            async with asyncio.timeout(self._deps.call_limit_s(contract)):
                return await self._deps.executor.run(call)
        except TimeoutError:
            error = NodeError(
                kind=ErrorKind.TRANSIENT,
                code="TIMEOUT",
                message=f"no result within {self._deps.call_limit_s(contract):g}s",
            )
            return ToolOutcome(output=None, error=error, started_at=started, finished_at=now())


def _dispatched(call: Call, at: datetime) -> NodeDispatched:
    return NodeDispatched(
        at=at,
        node_id=call.node_id,
        tool=call.tool,
        args=call.args,
        fingerprint=call.fingerprint,
        attempt=call.attempt,
        decision=call.decision,
    )


def _event_of(step: Deny | Fail, at: datetime) -> NodeDenied | NodeFailed:
    match step:
        case Deny(ready=ready, decision=decision):
            return NodeDenied(
                at=at,
                node_id=ready.node_id,
                tool=ready.tool,
                args=ready.args,
                fingerprint=ready.fingerprint,
                decision=decision,
            )
        case Fail(node_id=node_id, error=error):
            return NodeFailed(at=at, node_id=node_id, error=error)
        case _:
            assert_never(step)

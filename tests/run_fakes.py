"""Strict fakes for driving ``RunDriver`` without Ray, a database or a network, and the C-102 script.

The sink records every append and refuses gaps; the executor answers only scripted calls, each once; the
planner answers only its scripted steps, in order. Each fails the test on anything unexpected.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from actors.calls.call import ToolCall, ToolOutcome
from actors.observe.metrics import NO_METRICS, RunMetrics
from actors.run.context import Cancel
from actors.run.deps import CALL_SLACK_S, RunDeps, ToolEndpoint
from actors.run.driver import RunDriver
from dag.budget import Budgets
from dag.contracts import ToolCatalogue
from dag.events import ErrorKind, NodeError, RunCreated, RunEvent, RunFinished
from dag.fingerprint import canonical_json
from dag.health import ToolHealth
from dag.retry import RetryPolicy
from dag.run_state import RunState, apply, fold
from dag.states import NodeStatus
from dag.tokens import TaskTokens
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS
from mcp_server.planner import CASE_TOOL, DOCUMENTS_TOOL, POLICY_TOOL, RESOLVE_TOOL, ConformancePlanner
from planner import JoinDecision, Observation, PlanningContext
from tests.c102 import CASE_OUTPUT, DOCS_OUTPUT, POLICY_OUTPUT, RESOLVE_OUTPUT

MCP_URL = "http://mcp.test/mcp"
TOKENS = TaskTokens(key=b"k" * 32, audience=MCP_URL)
RUN_ID = "3f1c9a0e-5b7d-4e2a-9c61-0d8e2f4a7b19"
TENANT = "tenant-demo"
SUBJECT = "alice@tenant-demo"
CASE_ID = "C-102"
T0 = datetime(2026, 7, 20, 9, 0, tzinfo=UTC)
"""When scripted tool calls say they started; the run itself starts now (its deadline counts from then)."""
WAIT_S = 2.0
FAST_RETRY = RetryPolicy(base_s=0.001, cap_s=0.005)

CASE_ARGS = {"case_id": CASE_ID}
RESOLVE_ARGS = {"case_id": CASE_ID, "document_id": "DOC-C102-003"}


def ok(output: Any) -> ToolOutcome:
    return ToolOutcome(output=output, error=None, started_at=T0, finished_at=T0 + timedelta(milliseconds=40))


def failure(kind: ErrorKind, code: str, message: str) -> ToolOutcome:
    error = NodeError(kind=kind, code=code, message=message)
    return ToolOutcome(output=None, error=error, started_at=T0, finished_at=T0 + timedelta(seconds=10))


def transient(code: str = "UPSTREAM_DOWN") -> ToolOutcome:
    return failure(ErrorKind.TRANSIENT, code, "the service answered 503")


# ---------------------------------------------------------------- the event sink


class SinkDown(RuntimeError):
    """The event store is unreachable."""


class RecordingSink:
    """An in-memory event store: keeps every append and refuses a gap or overlap in sequence numbers."""

    def __init__(
        self,
        journal: list[tuple[str, str]] | None = None,
        *,
        fail_on: Callable[[Sequence[RunEvent]], bool] | None = None,
        failures: int = 0,
        first_seq: int = 2,
    ) -> None:
        self.appends: list[tuple[int, tuple[RunEvent, ...], RunState]] = []
        self.violations: list[str] = []
        self.refused: list[tuple[RunEvent, ...]] = []
        self._next_seq = first_seq  # seq 1 is the run_created event the run starts from
        self._journal = journal if journal is not None else []
        self._fail_on = fail_on
        self._failures = failures
        self._appended = asyncio.Event()

    async def append(self, state: RunState, first_seq: int, events: Sequence[RunEvent]) -> None:
        if self._failures and self._fail_on is not None and self._fail_on(events):
            self._failures -= 1
            self.refused.append(tuple(events))
            raise SinkDown("the event store is unreachable")
        if first_seq != self._next_seq:
            self.violations.append(f"append at seq {first_seq}, expected {self._next_seq}")
            raise AssertionError(self.violations[-1])
        if not events:
            self.violations.append("an empty append")
        self.appends.append((first_seq, tuple(events), state))
        self._next_seq += len(events)
        for event in events:
            self._journal.append(("recorded " + event.kind, getattr(event, "node_id", "")))
        self._appended.set()

    @property
    def events(self) -> list[RunEvent]:
        return [event for _, events, _ in self.appends for event in events]

    def of(self, kind: type[Any], node_id: str | None = None) -> list[Any]:
        return [
            event
            for event in self.events
            if isinstance(event, kind) and (node_id is None or getattr(event, "node_id", None) == node_id)
        ]

    @property
    def state(self) -> RunState:
        return self.appends[-1][2]

    async def reached(self, predicate: Callable[[RunState], bool]) -> RunState:
        """Wait until the last recorded state satisfies ``predicate``."""
        async with asyncio.timeout(WAIT_S):
            while not (self.appends and predicate(self.state)):
                self._appended.clear()
                await self._appended.wait()
        return self.state


# ---------------------------------------------------------------- the executor


def call_key(tool: str, args: Mapping[str, Any]) -> tuple[str, str]:
    return tool, canonical_json(args)


@dataclass
class Scripted:
    """One answer to one call. ``gate`` holds it back until set; ``hold_s`` keeps the call in flight a while."""

    outcome: ToolOutcome
    gate: asyncio.Event | None = None
    hold_s: float = 0.0


Script = Mapping[tuple[str, str], Scripted | Sequence[Scripted]]


class ScriptedExecutor:
    """A strict ToolExecutor: each scripted answer is given once, in order, to the call it is scripted for.

    A (tool, args) with several answers answers its calls in turn (a retry is a new call). Any call without
    an answer left is a test failure; so is an answer never asked for (``assert_done``).
    """

    def __init__(self, script: Script, journal: list[tuple[str, str]] | None = None) -> None:
        self._script = {
            key: [answers] if isinstance(answers, Scripted) else list(answers)
            for key, answers in script.items()
        }
        self._journal = journal if journal is not None else []
        self.calls: list[ToolCall] = []
        self.unexpected: list[ToolCall] = []
        self.cancelled: list[str] = []
        self.invoked: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.settled: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.in_flight = 0
        self.most_in_flight = 0

    def run(self, call: ToolCall) -> Any:
        # A plain function returning the coroutine, so the journal notes the moment run() is invoked.
        self._journal.append(("run", call.node_id))
        answers = self._script.get(call_key(call.tool, call.args))
        if not answers:
            self.unexpected.append(call)
            raise AssertionError(f"unscripted call {call.node_id}: {call_key(call.tool, call.args)}")
        step = answers.pop(0)
        self.calls.append(call)
        self.invoked[call.node_id].set()
        return self._perform(call, step)

    async def _perform(self, call: ToolCall, step: Scripted) -> ToolOutcome:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if step.gate is not None:
                await step.gate.wait()
            if step.hold_s:
                await asyncio.sleep(step.hold_s)
            return step.outcome
        except asyncio.CancelledError:
            self.cancelled.append(call.node_id)
            raise
        finally:
            self.in_flight -= 1
            self.settled[call.node_id].set()

    @property
    def unused(self) -> list[tuple[str, str]]:
        return sorted(key for key, answers in self._script.items() if answers)

    @property
    def called(self) -> list[str]:
        return [call.node_id for call in self.calls]

    def assert_done(self) -> None:
        assert self.unexpected == [], f"unscripted calls: {[c.node_id for c in self.unexpected]}"
        assert self.unused == [], f"scripted calls never made: {self.unused}"


# ---------------------------------------------------------------- the planner


@dataclass(frozen=True)
class Propose:
    answer: Mapping[str, Any] | BaseException


@dataclass(frozen=True)
class Decide:
    answer: JoinDecision | Callable[[Sequence[Observation]], JoinDecision]


class ScriptedPlanner:
    """A strict Planner: answers its steps in order; an unexpected call or an unused step fails the test."""

    name = "scripted"

    def __init__(self, *steps: Propose | Decide) -> None:
        self._steps = list(steps)
        self.errors: list[str] = []
        self.contexts: list[PlanningContext] = []
        self.proposing: list[PlanningContext] = []
        self.observations: list[list[Observation]] = []

    def _next(self, kind: type[Propose] | type[Decide]) -> Any:
        if not self._steps or not isinstance(self._steps[0], kind):
            expected = type(self._steps[0]).__name__ if self._steps else "nothing"
            self.errors.append(f"unexpected {kind.__name__.lower()}; the script expected {expected}")
            raise AssertionError(self.errors[-1])
        return self._steps.pop(0).answer

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        answer = self._next(Propose)
        self.contexts.append(context)
        self.proposing.append(context)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        answer = self._next(Decide)
        self.contexts.append(context)
        self.observations.append(list(observations))
        return answer(observations) if callable(answer) else answer

    def assert_done(self) -> None:
        assert self.errors == []
        assert self._steps == [], f"planner steps never used: {self._steps}"


# ---------------------------------------------------------------- the C-102 run

_C102_CALLS = {
    "case": (CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
    "policy": (POLICY_TOOL, CASE_ARGS, POLICY_OUTPUT),
    "docs": (DOCUMENTS_TOOL, CASE_ARGS, DOCS_OUTPUT),
    "resolve[0]": (RESOLVE_TOOL, RESOLVE_ARGS, RESOLVE_OUTPUT),
}


def only(*nodes: str, gates: Mapping[str, asyncio.Event] | None = None) -> dict[tuple[str, str], Scripted]:
    """The C-102 calls of ``nodes``, each answering its C-102 output; ``gates`` hold an answer back."""
    gates = gates or {}
    script: dict[tuple[str, str], Scripted] = {}
    for node in nodes:
        tool, args, output = _C102_CALLS[node]
        script[call_key(tool, args)] = Scripted(ok(output), gates.get(node))
    return script


def c102_script(gates: Mapping[str, asyncio.Event] | None = None) -> dict[tuple[str, str], Scripted]:
    return only(*_C102_CALLS, gates=gates)


def run_created(
    *,
    planner: str = "conformance",
    scopes: Sequence[str] = ALL_SCOPES,
    proposal: dict[str, Any] | None = None,
    budgets: Budgets | None = None,
    tenant_tools: Sequence[str] | None = None,
    stage: str = "investigate",
    tenant_id: str = TENANT,
    run_id: str = RUN_ID,
    resource: Mapping[str, str] | None = None,
) -> RunCreated:
    return RunCreated(
        at=datetime.now(UTC),
        run_id=run_id,
        tenant_id=tenant_id,
        subject=SUBJECT,
        scopes=tuple(sorted(scopes)),
        resource=dict(resource) if resource is not None else {"case_id": CASE_ID},
        goal="Are the documents of C-102 complete?",
        planner=planner,
        budgets=budgets or Budgets(),
        proposal=proposal,
        stage=stage,
        tenant_tools=tuple(tenant_tools) if tenant_tools is not None else None,
    )


def driver(
    sink: RecordingSink,
    executor: ScriptedExecutor,
    planner: Any | None = None,
    *,
    catalogue: ToolCatalogue = CASEOPS_TOOLS,
    health: ToolHealth | None = None,
    retry: RetryPolicy = FAST_RETRY,
    metrics: RunMetrics = NO_METRICS,
    call_slack_s: float = CALL_SLACK_S,
) -> RunDriver:
    planners = {"conformance": ConformancePlanner()}
    if planner is not None:
        planners["scripted"] = planner
    deps = RunDeps(
        executor=executor,
        catalogue=catalogue,
        planners=planners,
        endpoint=ToolEndpoint(url=MCP_URL, tokens=TOKENS),
        health=health if health is not None else ToolHealth(),
        retry=retry,
        rng=random.Random(7),
        metrics=metrics,
        call_slack_s=call_slack_s,
    )
    return RunDriver(deps, sink=sink)


async def drive(run: RunDriver, created: RunCreated, cancel: Cancel | None = None) -> RunState:
    return await asyncio.wait_for(run.drive(apply(None, created), last_seq=1, cancel=cancel), WAIT_S)


def assert_log_rebuilds(sink: RecordingSink, created: RunCreated, final: RunState) -> None:
    """The run ended, the sink saw contiguous appends, and its log folds into exactly the returned state."""
    assert sink.violations == []
    assert final.status.terminal
    assert isinstance(sink.events[-1], RunFinished)
    assert fold([created, *sink.events]) == final


def node_status(state: RunState) -> dict[str, NodeStatus]:
    return {node_id: state.nodes[node_id].status for node_id in state.order}


def snapshot_node(node_id: str, case_id: str = CASE_ID, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": CASE_TOOL, "args": {"case_id": case_id}, **extra}


def policy_node(node_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": POLICY_TOOL, "args": dict(CASE_ARGS), **extra}

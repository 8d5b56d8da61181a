"""Run state and the pure reducer that folds events into it.

The supervisor applies each event here after recording it; after a crash the same reducer rebuilds the
run from its stored events, so live state and recovered state cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, assert_never

from dag.budget import Budgets
from dag.errors import EventRefused, IllegalTransition
from dag.events import (
    AgentEnded,
    AgentStarted,
    CarriedChild,
    CarriedOutput,
    GroupSettled,
    JoinStarted,
    ModelUsed,
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
    ParentLink,
    PlanAccepted,
    PlanCompleted,
    PlanningStarted,
    PlanNodeAccepted,
    PlanReviewed,
    PlanReviewRequested,
    QuestionAnswered,
    QuestionAsked,
    RunContinued,
    RunCreated,
    RunEvent,
    RunFinished,
    RunParked,
    RunRecovered,
    RunResumed,
    RunWaiting,
    RunWoken,
)
from dag.plan import Plan, PlanNode, qualified_id
from dag.policy import Decision, Principal, RunAuthority
from dag.review import call_signature, unreviewed
from dag.run_resource import Resource
from dag.states import NodeStatus, RunStatus, StopReason, check_node_transition, check_run_transition

_Frozen = TypeVar("_Frozen", "RunState", "NodeState")


def child_id(group_id: str, index: int) -> str:
    return f"{group_id}[{index}]"


@dataclass(frozen=True)
class NodeState:
    """One node of a run: a plan node, or a child of a ``for_each`` node (``parent`` and ``index`` set)."""

    node_id: str
    tool: str
    status: NodeStatus = NodeStatus.PENDING
    plan_node_id: str = ""
    round: int = 1
    parent: str | None = None
    index: int | None = None
    children: tuple[str, ...] | None = None
    args: Mapping[str, Any] | None = None
    fingerprint: str | None = None
    decision: Decision | None = None
    attempts: int = 0
    output: Any = None
    error: NodeError | None = None
    reused_from: str | None = None
    reused_from_run: str | None = None
    """The earlier run whose node ``reused_from`` is (a continuation's carried output); ``None``: this run."""
    skipped_because: str | None = None
    dispatched_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    task: Mapping[str, Any] | None = None
    """The MCP task the current attempt's call runs as (``NodeTaskUpdated``), as last reported; ``None`` when
    the attempt made a plain call."""
    child_run_id: str | None = None
    """An agent node's child run (``AgentStarted``)."""
    reserved: tuple[int, float] = (0, 0.0)
    """The tokens and cost carved for its child run, held from the run's own while the child runs."""

    @property
    def is_group(self) -> bool:
        return self.children is not None


@dataclass(frozen=True)
class Answered:
    """A person's answer to the planner's question, with its author: what the planner sees of it, as an
    observation. Never authority: nothing in it changes the run's tenant, scopes, resource or budgets."""

    question: str
    answer: str
    by: str


@dataclass(frozen=True)
class Continuation:
    """What a continuation carries over from the runs it continues (``RunContinued``)."""

    continues: str
    by: str
    outputs: Mapping[str, CarriedOutput]
    operations: Mapping[tuple[str, str], str]
    children: Mapping[str, CarriedChild]


_NOTHING_CARRIED: Mapping[str, CarriedOutput] = {}
_NO_OPERATIONS: Mapping[tuple[str, str], str] = {}
_NO_CHILDREN: Mapping[str, CarriedChild] = {}


@dataclass(frozen=True)
class RunState:
    run_id: str
    principal: Principal
    resource: Resource
    goal: str
    planner: str
    budgets: Budgets
    created_at: datetime
    proposal: Mapping[str, Any] | None = None
    stage: str = "investigate"
    tenant_tools: frozenset[str] | None = None
    trace: Mapping[str, str] | None = None
    tool_pins: Mapping[str, str] | None = None
    """The definition digests the run's tools had when it was created (``RunCreated.tool_pins``)."""
    status: RunStatus = RunStatus.PENDING
    round: int = 0
    plans: tuple[Plan, ...] = ()
    specs: Mapping[str, PlanNode] = field(default_factory=dict)
    """Every plan node by its run id (``docs``, ``r2.docs``)."""
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    fingerprints: Mapping[str, str] = field(default_factory=dict)
    """Each dispatched action's fingerprint → the node that executes it (later identical nodes reuse it)."""
    proposals: Mapping[str, int] = field(default_factory=dict)
    """How often each fingerprint has been proposed and decided in this run (the repeat limit counts these)."""
    stop_reason: StopReason | None = None
    detail: str | None = None
    result: Mapping[str, Any] | None = None
    finished_at: datetime | None = None
    replan_reason: str | None = None
    """Why the current round was asked for (``None`` for the first)."""
    interrupted_by: StopReason | None = None
    interruption_detail: str | None = None
    """The hard limit that ended the current round early, while the run is joining."""
    recoveries: int = 0
    plan_open: bool = False
    """A streamed plan of the current round is still arriving: the round cannot drain yet."""
    tokens_used: int = 0
    cost_usd: float = 0.0
    unreported_model_calls: int = 0
    """Model calls whose usage the endpoint did not report: their tokens and cost are upper bounds."""
    model: str | None = None
    """The model the run named for its planning (``RunCreated.model``); ``None``: the planner's own."""
    review: bool = False
    """Each round's plan waits for a person's yes before anything of it runs."""
    review_round: int | None = None
    """The round whose plan waits for its review now; nothing of it is dispatched meanwhile."""
    question: tuple[int, str] | None = None
    """The planner's question waiting for a person's answer now: its number and text."""
    questions_asked: int = 0
    expired_question: str | None = None
    """The question no one answered in time (the run stopped on it): a continuation may answer it."""
    answers: tuple[Answered, ...] = ()
    """Every question answered, in order: the planner is shown them."""
    reviewed_calls: frozenset[str] = frozenset()
    """The call signatures (``dag.review.call_signature``) of every node a person approved: a replan repeating
    one does not wait again."""
    continuation: Continuation | None = None
    """What the run it continues lends it (``RunContinued``); ``None`` for a run that continues none. One
    field, not four: the reducer copies every field of the state on every event."""
    parked_since: datetime | None = None
    """The run is parked (``RunParked``): it waits for people and for nothing else, and no supervisor drives
    it until it is woken (``RunWoken``)."""
    parked_s: float = 0.0
    """The seconds the run spent parked so far: its clock stood still meanwhile."""
    waiting_on: tuple[str, ...] = ()
    """The operations the run was last said to wait on (``RunWaiting``), until it runs again."""
    parent: ParentLink | None = None
    """The agent node this run is the child run of (``None``: a run of its own)."""
    child_nodes: int = 0
    """The nodes its agent nodes' child runs held, each counted when it ended: they count against
    ``max_nodes`` as the run's own do."""

    @property
    def depth(self) -> int:
        """How deep among agent runs this run is: 0 for a run of its own, its parent's depth + 1 for a child."""
        return self.parent.depth if self.parent is not None else 0

    @property
    def max_steps(self) -> int | None:
        """The steps (rounds) a loop agent's child run may take; ``None``: not a loop, ``max_replans`` bounds
        its rounds."""
        return self.parent.max_steps if self.parent is not None else None

    @property
    def deadline(self) -> datetime:
        """When the run's own work must have ended: ``deadline_s`` after its start, plus the time it was
        parked (while parked, it has none: nothing is driven)."""
        return self.budgets.deadline_of(self.created_at) + timedelta(seconds=self.parked_s)

    def active_s(self, now: datetime) -> float:
        """The seconds of its own work the run has taken by ``now``: its age, less the time it was parked."""
        parked = self.parked_s
        if self.parked_since is not None:
            parked += max(0.0, (now - self.parked_since).total_seconds())
        return (now - self.created_at).total_seconds() - parked

    @property
    def continues(self) -> str | None:
        """The earlier run this one continues."""
        return self.continuation.continues if self.continuation is not None else None

    @property
    def continued_by(self) -> str | None:
        """Who continued it: ``person:TENANT/SUBJECT``."""
        return self.continuation.by if self.continuation is not None else None

    @property
    def carried(self) -> Mapping[str, CarriedOutput]:
        """The reads that succeeded in the earlier runs of the chain, by fingerprint: reused, never called
        again."""
        return self.continuation.outputs if self.continuation is not None else _NOTHING_CARRIED

    @property
    def carried_children(self) -> Mapping[str, CarriedChild]:
        """The agent nodes whose child runs did not complete in the earlier runs of the chain, by fingerprint:
        the identical agent node's child continues that child run."""
        return self.continuation.children if self.continuation is not None else _NO_CHILDREN

    @property
    def carried_operations(self) -> Mapping[tuple[str, str], str]:
        """(tool, arguments hash) → the earlier run's operation this run takes over when it proposes that
        write."""
        return self.continuation.operations if self.continuation is not None else _NO_OPERATIONS

    @property
    def plan(self) -> Plan | None:
        """The first round's plan."""
        return self.plans[0] if self.plans else None

    @property
    def awaits_review(self) -> bool:
        """Whether the current round must wait for a person's yes before anything of it is dispatched: it
        waits already, or its plan (whole, not still streaming) holds a call no earlier yes covered."""
        if not self.review or self.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            return False
        if self.review_round is not None:
            return True
        if self.plan_open or len(self.plans) < self.round:
            return False
        return self.status is RunStatus.RUNNING and bool(
            unreviewed(self.plans[self.round - 1], self.reviewed_calls)
        )

    @property
    def authority(self) -> RunAuthority:
        return RunAuthority(self.principal, self.resource, self.stage, self.tenant_tools)

    def spec_of(self, node: NodeState) -> PlanNode:
        return self.specs[qualified_id(node.round, node.plan_node_id)]

    def earlier_names(self) -> frozenset[str]:
        """How a later round's plan names this run's nodes so far: ``r1.docs``, ``r2.check``."""
        return frozenset(
            f"r{node.round}.{node.plan_node_id}" for node in self.nodes.values() if node.parent is None
        )

    def output_of(self, node_id: str) -> Any:
        """The structured output dependents see: a group's is the list of its children's outputs."""
        node = self.nodes[node_id]
        if node.children is not None:
            return [self.output_of(child) for child in node.children]
        return node.output

    def rounds_without_new_evidence(self) -> int:
        """Replan rounds (after the first) in which no node produced a new output (reuses do not count)."""
        fresh = {
            node.round
            for node in self.nodes.values()
            if node.status is NodeStatus.SUCCEEDED and not node.is_group
        }
        return sum(1 for round_number in range(2, self.round + 1) if round_number not in fresh)

    def node_count(self) -> int:
        """Nodes in the run's DAG, ``for_each`` parents and children alike, and those of its agents' child runs
        that ended: what ``max_nodes`` bounds."""
        return len(self.nodes) + self.child_nodes

    def reserved_for_children(self, *, besides: str | None = None) -> tuple[int, float]:
        """The tokens and cost carved for the child runs in flight (but the one of node ``besides``): held from
        what the run has left until each child ends and its spend replaces its share."""
        held = [
            node.reserved
            for node in self.nodes.values()
            if node.status is NodeStatus.RUNNING and node.child_run_id is not None and node.node_id != besides
        ]
        return sum(tokens for tokens, _ in held), sum(cost for _, cost in held)

    def in_flight(self) -> list[NodeState]:
        """Nodes with a call out, or waiting to be retried."""
        return [
            node
            for node in self.nodes.values()
            if node.status in (NodeStatus.RUNNING, NodeStatus.RETRYING) and not node.is_group
        ]


def _evolve(instance: _Frozen, **changes: Any) -> _Frozen:
    """``dataclasses.replace`` without running ``__init__`` again: a copy of the instance's fields with
    ``changes`` applied, at a third of the cost. The reducer replaces a state several times per event and
    applies every event of every run, so this is on the supervisor's hot path. ``RunState`` and ``NodeState``
    have no ``__post_init__``, so nothing is skipped."""
    unknown = changes.keys() - instance.__dataclass_fields__.keys()
    if unknown:
        raise TypeError(f"{type(instance).__name__} has no fields {sorted(unknown)}")
    evolved = object.__new__(type(instance))
    vars(evolved).update(vars(instance), **changes)
    return evolved


def _set_run_status(state: RunState, status: RunStatus, **changes: Any) -> RunState:
    check_run_transition(state.status, status)
    return _evolve(state, status=status, **changes)


def _with_node(state: RunState, node_id: str, status: NodeStatus | None = None, **changes: Any) -> RunState:
    node = state.nodes[node_id]
    if status is not None:
        check_node_transition(node.status, status)
        changes["status"] = status
    nodes = dict(state.nodes)
    nodes[node_id] = _evolve(node, **changes)
    return _evolve(state, nodes=nodes)


def apply(state: RunState | None, event: RunEvent) -> RunState:
    """The state after ``event``. Raises ``IllegalTransition`` for a transition the tables forbid and
    ``EventRefused`` for an event out of order or contradicting the state."""
    if state is None:
        if not isinstance(event, RunCreated):
            raise EventRefused(event.kind, f"a run's first event must be run_created, not {event.kind}")
        return RunState(
            run_id=event.run_id,
            principal=Principal(event.tenant_id, event.subject, frozenset(event.scopes)),
            resource=dict(event.resource),
            goal=event.goal,
            planner=event.planner,
            budgets=event.budgets,
            created_at=event.at,
            proposal=event.proposal,
            stage=event.stage,
            trace=event.trace,
            tenant_tools=frozenset(event.tenant_tools) if event.tenant_tools is not None else None,
            tool_pins=event.tool_pins,
            review=event.review,
            model=event.model,
            parent=event.parent,
        )
    if state.parked_since is not None and not isinstance(event, RunWoken):
        raise EventRefused(event.kind, "a parked run must be woken before anything else happens to it")
    match event:
        case RunCreated():
            raise EventRefused(event.kind, "run_created may only start a run")
        case RunContinued():
            if state.status is not RunStatus.PENDING or state.round or state.continues is not None:
                raise EventRefused(event.kind, "run_continued may only follow run_created")
            continuation = Continuation(
                continues=event.continues,
                by=event.by,
                outputs={output.fingerprint: output for output in event.outputs},
                operations={(op.tool, op.args_hash): op.operation_id for op in event.operations},
                children={child.fingerprint: child for child in event.children},
            )
            return _evolve(
                state,
                continuation=continuation,
                answers=tuple(Answered(item.question, item.answer, item.by) for item in event.answers),
            )
        case PlanningStarted():
            return _set_run_status(
                state,
                RunStatus.PLANNING,
                round=event.round,
                replan_reason=event.reason,
                interrupted_by=None,
                interruption_detail=None,
            )
        case PlanAccepted():
            if event.round != state.round:
                raise EventRefused(
                    event.kind, f"plan for round {event.round} accepted during round {state.round}"
                )
            check_run_transition(state.status, RunStatus.RUNNING)
            plan = Plan.parse(event.plan)
            state = _add_plan_nodes(state, event, plan.nodes, whole=plan)
            return _set_run_status(state, RunStatus.RUNNING, plan_open=False)
        case PlanNodeAccepted():
            if event.round != state.round:
                raise EventRefused(
                    event.kind, f"plan node for round {event.round} accepted during round {state.round}"
                )
            if not (
                state.status is RunStatus.PLANNING or (state.status is RunStatus.RUNNING and state.plan_open)
            ):
                raise IllegalTransition("run", state.status.value, "a streamed plan node")
            spec = PlanNode.model_validate(event.node)
            state = _add_plan_nodes(state, event, (spec,), whole=None)
            if state.status is RunStatus.PLANNING:
                return _set_run_status(state, RunStatus.RUNNING, plan_open=True)
            return _evolve(state, plan_open=True)
        case PlanCompleted():
            if event.round != state.round:
                raise EventRefused(
                    event.kind, f"plan of round {event.round} completed during round {state.round}"
                )
            if not (
                state.status is RunStatus.PLANNING or (state.status is RunStatus.RUNNING and state.plan_open)
            ):
                raise IllegalTransition("run", state.status.value, "the end of a streamed plan")
            if state.status is RunStatus.PLANNING:  # not a single node arrived
                if len(state.plans) < event.round:
                    state = _evolve(state, plans=(*state.plans, Plan(nodes=())))
                return _set_run_status(state, RunStatus.RUNNING, plan_open=False)
            return _evolve(state, plan_open=False)
        case ModelUsed():
            return _evolve(
                state,
                tokens_used=state.tokens_used + event.input_tokens + event.output_tokens,
                cost_usd=state.cost_usd + event.cost_usd,
                unreported_model_calls=state.unreported_model_calls + (not event.reported),
            )
        case NodeExpanded():
            group = state.nodes[event.node_id]
            children = tuple(child_id(event.node_id, index) for index in range(event.count))
            state = _with_node(state, event.node_id, NodeStatus.RUNNING, children=children)
            nodes = dict(state.nodes)
            for index, node_id in enumerate(children):
                nodes[node_id] = NodeState(
                    node_id=node_id,
                    tool=group.tool,
                    plan_node_id=group.plan_node_id,
                    parent=group.node_id,
                    index=index,
                )
            at = state.order.index(event.node_id) + 1  # children read right after their parent
            return _evolve(state, nodes=nodes, order=state.order[:at] + children + state.order[at:])
        case AgentStarted():
            node = state.nodes[event.node_id]
            if node.status is not NodeStatus.RUNNING or state.spec_of(node).agent is None:
                raise EventRefused(event.kind, f"{event.node_id}: not an agent node in flight")
            if node.child_run_id not in (None, event.child_run_id):
                raise EventRefused(event.kind, f"{event.node_id}: already has child run {node.child_run_id}")
            return _with_node(
                state,
                event.node_id,
                child_run_id=event.child_run_id,
                reserved=(event.reserved_tokens, event.reserved_cost_usd),
            )
        case AgentEnded():
            node = state.nodes[event.node_id]
            if node.child_run_id != event.child_run_id or node.status is not NodeStatus.RUNNING:
                raise EventRefused(
                    event.kind, f"{event.node_id}: child run {event.child_run_id} is not in flight"
                )
            state = _with_node(state, event.node_id, reserved=(0, 0.0))  # its spend replaces its share
            return _evolve(
                state,
                tokens_used=state.tokens_used + event.tokens,
                cost_usd=state.cost_usd + event.cost_usd,
                child_nodes=state.child_nodes + event.nodes,
            )
        case NodeDispatched():
            node = state.nodes[event.node_id]
            if event.attempt != node.attempts + 1:
                raise EventRefused(
                    event.kind, f"{event.node_id}: attempt {event.attempt} after {node.attempts}"
                )
            state = _with_node(
                state,
                event.node_id,
                NodeStatus.RUNNING,
                args=event.args,
                fingerprint=event.fingerprint,
                decision=event.decision,
                attempts=event.attempt,
                dispatched_at=event.at,
                task=None,
            )
            if event.attempt > 1:
                return state  # a retry is the same proposal, not a new one
            state = _proposed(state, event.fingerprint)
            executor = state.fingerprints.get(event.fingerprint)
            if executor is not None and not _answerless(state.nodes[executor]):
                return state
            return _evolve(state, fingerprints={**state.fingerprints, event.fingerprint: event.node_id})
        case NodeDenied():
            state = _with_node(
                state,
                event.node_id,
                NodeStatus.DENIED,
                args=event.args,
                fingerprint=event.fingerprint,
                decision=event.decision,
                finished_at=event.at,
            )
            return _proposed(state, event.fingerprint)
        case NodeReused():
            output, source = _reused_output(state, event)
            state = _with_node(
                state,
                event.node_id,
                NodeStatus.REUSED,
                args=event.args,
                fingerprint=event.fingerprint,
                output=output,
                reused_from=event.source_node_id,
                reused_from_run=source,
                finished_at=event.at,
            )
            return _proposed(state, event.fingerprint)
        case NodeTaskUpdated():
            node = state.nodes[event.node_id]
            if node.status is not NodeStatus.RUNNING or event.attempt != node.attempts:
                raise EventRefused(
                    event.kind,
                    f"{event.node_id}: no attempt {event.attempt} in flight (attempt {node.attempts}, "
                    f"{node.status.value})",
                )
            return _with_node(state, event.node_id, task=event.task)
        case NodeRetryScheduled():
            return _with_node(state, event.node_id, NodeStatus.RETRYING, error=event.error)
        case NodeSucceeded():
            return _with_node(
                state,
                event.node_id,
                NodeStatus.SUCCEEDED,
                output=event.output,
                started_at=event.started_at,
                finished_at=event.finished_at,
            )
        case NodeFailed():
            return _with_node(
                state,
                event.node_id,
                NodeStatus.FAILED,
                error=event.error,
                started_at=event.started_at,
                finished_at=event.finished_at or event.at,
            )
        case NodeSkipped():
            return _with_node(
                state,
                event.node_id,
                NodeStatus.SKIPPED,
                skipped_because=event.cause_node_id,
                finished_at=event.at,
            )
        case GroupSettled():
            status = NodeStatus.SUCCEEDED if event.succeeded else NodeStatus.FAILED
            return _with_node(state, event.node_id, status, finished_at=event.at)
        case JoinStarted():
            return _set_run_status(
                state,
                RunStatus.JOINING,
                interrupted_by=event.interrupted_by,
                interruption_detail=event.reason,
            )
        case RunWaiting():
            if state.status is RunStatus.WAITING:  # one more operation waits
                return _evolve(state, waiting_on=event.operation_ids)
            return _set_run_status(state, RunStatus.WAITING, waiting_on=event.operation_ids)
        case PlanReviewRequested():
            if not state.review or event.round != state.round or state.review_round is not None:
                raise EventRefused(
                    event.kind, f"no review of round {event.round} can be asked for in round {state.round}"
                )
            return _set_run_status(state, RunStatus.WAITING, review_round=event.round)
        case PlanReviewed():
            if event.round != state.review_round:
                raise EventRefused(event.kind, f"round {event.round}'s plan does not wait for a review")
            if event.verdict != "approved":  # the run ends with the event that follows
                return _evolve(state, review_round=None)
            approved = frozenset(call_signature(node) for node in state.plans[event.round - 1].nodes)
            return _set_run_status(
                state, RunStatus.RUNNING, review_round=None, reviewed_calls=state.reviewed_calls | approved
            )
        case QuestionAsked():
            if event.round != state.round or event.number != state.questions_asked + 1:
                raise EventRefused(
                    event.kind,
                    f"question {event.number} asked in round {state.round} after {state.questions_asked}",
                )
            return _set_run_status(
                state, RunStatus.WAITING, question=(event.number, event.text), questions_asked=event.number
            )
        case QuestionAnswered():
            if state.question is None or event.number != state.question[0]:
                raise EventRefused(event.kind, f"question {event.number} does not wait for an answer")
            if event.answer is None:  # expired: the run ends with the event that follows
                return _evolve(state, question=None, expired_question=state.question[1])
            answered = Answered(state.question[1], event.answer, event.by)
            return _set_run_status(
                state, RunStatus.PLANNING, question=None, answers=(*state.answers, answered)
            )
        case RunResumed():
            return _set_run_status(state, RunStatus.RUNNING, waiting_on=())
        case RunParked():
            if state.status is not RunStatus.WAITING or state.parked_since is not None:
                raise EventRefused(event.kind, f"a run {state.status.value} cannot be parked")
            return _evolve(state, parked_since=event.at)
        case RunWoken():
            if state.parked_since is None:
                raise EventRefused(event.kind, "only a parked run is woken")
            parked = max(0.0, (event.at - state.parked_since).total_seconds())
            return _evolve(state, parked_since=None, parked_s=state.parked_s + parked)
        case RunRecovered():
            if state.status.terminal:
                raise EventRefused(event.kind, "a finished run cannot be recovered")
            return _evolve(state, recoveries=state.recoveries + 1)
        case RunFinished():
            if not event.status.terminal:
                raise EventRefused(event.kind, f"run_finished needs a terminal status, not {event.status}")
            state = _set_run_status(
                state,
                event.status,
                stop_reason=event.stop_reason,
                detail=event.detail,
                result=event.result,
                finished_at=event.at,
            )
            for node in list(state.nodes.values()):
                if not node.status.terminal:
                    state = _with_node(state, node.node_id, NodeStatus.CANCELLED, finished_at=event.at)
            return state
        case _:
            assert_never(event)


def _add_plan_nodes(
    state: RunState,
    event: PlanAccepted | PlanNodeAccepted,
    specs: tuple[PlanNode, ...],
    *,
    whole: Plan | None,
) -> RunState:
    """The round's plan (whole, or one more streamed node) and its nodes, added to the run."""
    round_number = event.round
    nodes = dict(state.nodes)
    all_specs = dict(state.specs)
    added = []
    for spec in specs:
        node_id = qualified_id(round_number, spec.id)
        if node_id in nodes:
            raise EventRefused(event.kind, f"node {node_id} is already in the run")
        nodes[node_id] = NodeState(
            node_id=node_id,
            tool=spec.tool,
            plan_node_id=spec.id,
            round=round_number,
            children=() if spec.for_each is not None else None,
        )
        all_specs[node_id] = spec
        added.append(node_id)
    if len(state.plans) < round_number:
        plans = (*state.plans, whole if whole is not None else Plan(nodes=specs))
    else:  # a streamed round grows node by node
        current = state.plans[round_number - 1]
        plans = (*state.plans[: round_number - 1], Plan(nodes=(*current.nodes, *specs)))
    return _evolve(state, plans=plans, specs=all_specs, nodes=nodes, order=state.order + tuple(added))


def _reused_output(state: RunState, event: NodeReused) -> tuple[Any, str | None]:
    """The output ``event`` reuses, and the earlier run it comes from (``None``: this run's own node)."""
    if event.source_run_id is None:
        source = state.nodes[event.source_node_id]
        if not source.status.has_output:
            raise EventRefused(event.kind, f"{event.node_id} reuses {source.node_id}, which has no output")
        return source.output, None
    carried = state.carried.get(event.fingerprint)
    if carried is None or (carried.run_id, carried.node_id) != (event.source_run_id, event.source_node_id):
        raise EventRefused(event.kind, f"{event.node_id} reuses an output the run did not carry over")
    return carried.output, carried.run_id


def _answerless(node: NodeState) -> bool:
    """Ended without an output: a later identical dispatch executes the action from then on."""
    return node.status.terminal and not node.status.has_output


def _proposed(state: RunState, fingerprint: str) -> RunState:
    return _evolve(state, proposals={**state.proposals, fingerprint: state.proposals.get(fingerprint, 0) + 1})


def fold(events: Iterable[RunEvent]) -> RunState:
    """Rebuild a run from its events, oldest first."""
    state: RunState | None = None
    for event in events:
        state = apply(state, event)
    if state is None:
        raise EventRefused(None, "a run has at least one event")
    return state

"""Dispatch: what a round does with each node of its frontier, and with each retry that is due, as values.

For every candidate the scheduler found (``dag.scheduler``) ``dispatch`` asks the one judge of each thing —
the tool's withdrawal, its contract (do the arguments fit), the policy (may it run), the gate (has it run),
the budgets (must the round stop), the tool's circuit (is it well) — and answers with a step. ``retries``
does the same for retries whose backoff has passed. ``RoundExecution`` records the steps, starts the calls
and keeps the clocks; it decides nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, assert_never

from dag.agents import AGENT_DEPTH_LIMIT, AwaitSiblings, StartAgent, start_agent
from dag.budget import STOP_REASON_OF_BUDGET
from dag.contracts import ToolCatalogue
from dag.errors import BudgetExceeded
from dag.events import ErrorKind, NodeError
from dag.gate import AlreadyFailed, Dispatch, RepeatLimit, Reuse, ReuseCarried, Wait, gate
from dag.health import Go, HealthKey, ToolHealth, WaitFor
from dag.policy import Decision, authorize, effective_tools
from dag.run_state import RunState
from dag.scheduler import Candidate, Expand, Ready, Runnable, Settle, Skip, Unresolvable, resolve
from dag.states import StopReason
from dag.validate import check_arguments


class Unoffered(Protocol):
    """Why a declared tool may not be called now (its server unreachable, its definition changed since the
    run pinned it): the denial its nodes are recorded with, and the stop reason of the run that needs it."""

    @property
    def decision(self) -> Decision: ...

    @property
    def stop_reason(self) -> StopReason: ...

    @property
    def detail(self) -> str: ...


Withdrawal = Callable[[str, Mapping[str, str] | None], Unoffered | None]
"""Why a tool may not be called now, given the definitions the run pinned (``None``: it may)."""

# ---------------------------------------------------------------- the steps


@dataclass(frozen=True)
class Fail:
    """The node fails without a call: an unresolvable reference, arguments that do not fit, an identical
    action that already failed, or (a retry) a denial."""

    node_id: str
    error: NodeError


@dataclass(frozen=True)
class Deny:
    """The policy, or the tool's withdrawal, refuses the node's action: recorded with the decision."""

    ready: Ready
    decision: Decision


@dataclass(frozen=True)
class ReuseOutput:
    """The identical action already has an output in this run: the node takes it, nothing is called."""

    ready: Ready
    source_node_id: str
    source_run_id: str | None = None
    """The earlier run the output comes from (a continuation's carried read); ``None``: this run."""


@dataclass(frozen=True)
class AwaitIdentical:
    """The identical action is in flight: the node is decided again when it lands."""

    node_id: str


@dataclass(frozen=True)
class HoldForCapacity:
    """``max_parallel`` calls are out: ``waiting`` runnable nodes wait for one to land (not even resolved)."""

    waiting: int


@dataclass(frozen=True)
class HoldForCircuit:
    """The tool is resting (its circuit is open): the node waits; the round looks again in ``seconds``."""

    node_id: str
    seconds: float


@dataclass(frozen=True)
class Probe:
    """The node's call, which follows, is the one probe of ``key``'s half-open circuit: its outcome must be
    recorded with the circuit, or the probe released."""

    node_id: str
    key: HealthKey


@dataclass(frozen=True)
class Call:
    """Start the node's call: attempt ``attempt`` of ``tool`` with ``args``, under ``decision``."""

    node_id: str
    tool: str
    args: dict[str, Any]
    fingerprint: str
    attempt: int
    decision: Decision


@dataclass(frozen=True)
class Stop:
    """A hard limit: the round starts nothing more and stops with ``reason``; ``last``, the node's own step
    (a denial, a failure), is recorded with what was decided before."""

    reason: StopReason
    detail: str
    last: Deny | Fail | None = None


Step = (
    Skip
    | Settle
    | Expand
    | Fail
    | Deny
    | ReuseOutput
    | AwaitIdentical
    | AwaitSiblings
    | HoldForCapacity
    | HoldForCircuit
    | Probe
    | Call
    | StartAgent
    | Stop
)
RetryStep = HoldForCircuit | Probe | Call | Fail | Stop

# ---------------------------------------------------------------- the decisions


def dispatch(
    state: RunState,
    candidates: Iterable[Candidate],
    *,
    in_flight: int,
    catalogue: ToolCatalogue,
    withdrawal: Withdrawal,
    observed: Mapping[str, frozenset[str]],
    health: ToolHealth,
    now: float,
    at: datetime | None = None,
    agent_depth: int = AGENT_DEPTH_LIMIT,
) -> list[Step]:
    """A step for each of ``candidates`` (in order) while ``in_flight`` calls are out, until one stops the
    round. ``observed`` holds the values the run's outputs showed (``policy.observed_values``); ``health``
    admits calls at monotonic time ``now`` (and marks a half-open circuit's probe). An agent node's child run
    (``dag.agents.start_agent``) takes a call's place under ``max_parallel``, its budgets carved at wall-clock
    time ``at``, at most ``agent_depth`` agent levels deep."""
    steps: list[Step] = []
    budgets = state.budgets
    room = budgets.calls_room(in_flight=in_flight)
    nodes = state.node_count()
    held = 0
    dispatching: set[str] = set()
    decided: Counter[str] = Counter()  # proposals decided in this step, not yet in the state
    authority = state.authority
    candidates = list(candidates)
    sharing = sum(1 for candidate in candidates if _may_ask_models(state, candidate))
    # agent nodes of this step whose children may ask a model: they share the tokens and cost left
    carved_here = (0, 0.0)  # what the children started in this step were carved, not yet in the state
    for candidate in candidates:
        match candidate:
            case Runnable():
                if room <= 0:
                    held += 1  # max_parallel: not even resolved until a call lands
                    continue
                resolved = resolve(state, candidate.node_id)
                if isinstance(resolved, Unresolvable):
                    steps.append(_unresolvable(resolved))
                    continue
                ready = resolved
                agent = state.spec_of(state.nodes[ready.node_id]).agent
                if agent is not None:
                    carried = state.carried.get(ready.fingerprint)
                    if carried is not None:  # its child run completed in a run this one continues
                        steps.append(ReuseOutput(ready, carried.node_id, carried.run_id))
                        continue
                    offered = effective_tools(authority, catalogue)
                    moment = at if at is not None else datetime.now(UTC)
                    started = start_agent(
                        state,
                        ready,
                        agent,
                        offered,
                        depth_limit=agent_depth,
                        at=moment,
                        share=max(sharing, 1),
                        held=carved_here,
                    )
                    if agent.may_ask_models:
                        sharing -= 1
                    if isinstance(started, NodeError):
                        steps.append(Fail(ready.node_id, started))
                        continue
                    if isinstance(started, AwaitSiblings):
                        steps.append(started)
                        continue
                    room -= 1
                    carved_here = (carved_here[0] + started.reserved[0], carved_here[1] + started.reserved[1])
                    steps.append(started)
                    continue
                withdrawn = withdrawal(ready.tool, state.tool_pins)
                if withdrawn is not None:
                    denial = Deny(ready, withdrawn.decision)
                    steps.append(Stop(withdrawn.stop_reason, f"{ready.node_id}: {withdrawn.detail}", denial))
                    return steps
                contract = catalogue.get(ready.tool)
                problem = check_arguments(contract, ready.args) if contract is not None else None
                if problem is not None:
                    error = NodeError(kind=ErrorKind.CONTRACT, code="INVALID_ARGUMENTS", message=problem)
                    steps.append(Fail(ready.node_id, error))
                    continue
                decision = authorize(authority, catalogue, ready.tool, ready.args, observed)
                if not decision.allowed:
                    decided[ready.fingerprint] += 1
                    steps.append(Deny(ready, decision))
                    continue
                verdict = gate(state, ready.fingerprint, dispatching=dispatching, decided=decided)
                if not isinstance(verdict, Wait | RepeatLimit):
                    decided[ready.fingerprint] += 1
                match verdict:
                    case Wait():
                        steps.append(AwaitIdentical(ready.node_id))
                    case RepeatLimit(proposals=proposals, limit=limit):
                        detail = (
                            f"{ready.node_id}: {ready.tool} with these arguments was proposed "
                            f"{proposals} times (limit {limit})"
                        )
                        steps.append(Stop(StopReason.REPEATED_ACTION_FINGERPRINT, detail))
                        return steps
                    case Reuse(source_node_id=source):
                        steps.append(ReuseOutput(ready, source))
                    case ReuseCarried(source_run_id=run, source_node_id=source):
                        steps.append(ReuseOutput(ready, source, run))
                    case AlreadyFailed(source_node_id=source):
                        error = NodeError(
                            kind=ErrorKind.BUSINESS,
                            code="IDENTICAL_ACTION_FAILED",
                            message=f"the identical action of {source!r} already ran and failed",
                        )
                        steps.append(Fail(ready.node_id, error))
                    case Dispatch():
                        key = (state.principal.tenant_id, ready.tool)
                        admission = health.admit(key, now)
                        match admission:
                            case WaitFor(seconds=seconds):
                                steps.append(HoldForCircuit(ready.node_id, seconds))
                            case Go(probe=probe):
                                if probe:
                                    steps.append(Probe(ready.node_id, key))
                                room -= 1
                                dispatching.add(ready.fingerprint)
                                steps.append(
                                    Call(
                                        ready.node_id, ready.tool, ready.args, ready.fingerprint, 1, decision
                                    )
                                )
                            case unknown_admission:
                                assert_never(unknown_admission)
                    case unknown_verdict:
                        assert_never(unknown_verdict)
            case Skip() | Settle():
                steps.append(candidate)
            case Unresolvable():
                steps.append(_unresolvable(candidate))
            case Expand():
                try:
                    budgets.check_expansion(nodes=nodes, fanout=candidate.count)
                except BudgetExceeded as exc:
                    steps.append(Stop(STOP_REASON_OF_BUDGET[exc.budget], f"{candidate.node_id}: {exc}"))
                    return steps
                nodes += candidate.count
                steps.append(candidate)
            case unexpected:
                assert_never(unexpected)
    if held:
        steps.append(HoldForCapacity(held))
    return steps


def retries(
    state: RunState,
    due: Sequence[str],
    *,
    in_flight: int,
    catalogue: ToolCatalogue,
    withdrawal: Withdrawal,
    observed: Mapping[str, frozenset[str]],
    health: ToolHealth,
    now: float,
) -> list[RetryStep]:
    """A step for each retry of ``due``, oldest first, while ``max_parallel`` leaves room, until one stops the
    round. A retry is a new dispatch: its tool's circuit must let it through, and it is authorized again (a
    tool withdrawn meanwhile stops the round, as a fresh dispatch of it would)."""
    steps: list[RetryStep] = []
    room = state.budgets.calls_room(in_flight=in_flight)
    for node_id in due:
        if room <= 0:
            break
        node = state.nodes[node_id]
        key = (state.principal.tenant_id, node.tool)
        admission = health.admit(key, now)
        match admission:
            case WaitFor(seconds=seconds):
                steps.append(HoldForCircuit(node_id, seconds))
                continue
            case Go(probe=probe):
                if probe:
                    steps.append(Probe(node_id, key))
            case unexpected:
                assert_never(unexpected)
        step = redispatch(state, node_id, catalogue=catalogue, withdrawal=withdrawal, observed=observed)
        steps.append(step)
        if isinstance(step, Stop):
            break
        if isinstance(step, Call):
            room -= 1
    return steps


def redispatch(
    state: RunState,
    node_id: str,
    *,
    catalogue: ToolCatalogue,
    withdrawal: Withdrawal,
    observed: Mapping[str, frozenset[str]],
) -> Call | Fail | Stop:
    """The next attempt of a node that failed and may be retried: authorized again, unless its tool was
    withdrawn meanwhile (then the node fails and the round stops)."""
    node = state.nodes[node_id]
    assert node.args is not None
    assert node.fingerprint is not None
    withdrawn = withdrawal(node.tool, state.tool_pins)
    decision = (
        withdrawn.decision
        if withdrawn is not None
        else authorize(state.authority, catalogue, node.tool, node.args, observed)
    )
    if not decision.allowed:
        error = NodeError(kind=ErrorKind.AUTHORIZATION, code=decision.rule_id, message=decision.reason)
        failure = Fail(node_id, error)
        if withdrawn is not None:
            return Stop(withdrawn.stop_reason, f"{node_id}: {withdrawn.detail}", failure)
        return failure
    return Call(node_id, node.tool, dict(node.args), node.fingerprint, node.attempts + 1, decision)


def past_deadline(state: RunState, now: datetime) -> Stop | None:
    """The round's stop once the run's wall-clock deadline has passed, else ``None``."""
    try:
        state.budgets.check_deadline(active_s=state.active_s(now))
    except BudgetExceeded as exc:
        return Stop(STOP_REASON_OF_BUDGET[exc.budget], f"the run's deadline of {exc.limit:g}s passed")
    return None


def _unresolvable(step: Unresolvable) -> Fail:
    return Fail(step.node_id, NodeError(kind=ErrorKind.CONTRACT, code=step.code, message=step.message))


def _may_ask_models(state: RunState, candidate: Candidate) -> bool:
    """Whether ``candidate`` is an agent node whose child may ask a model (a runnable one: it may start now)."""
    if not isinstance(candidate, Runnable):
        return False
    agent = state.spec_of(state.nodes[candidate.node_id]).agent
    return agent is not None and agent.may_ask_models

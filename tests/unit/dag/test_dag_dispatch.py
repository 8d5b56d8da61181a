"""``dispatch`` and ``retries``: the step a round takes for each candidate and each due retry, as a value."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    DOCUMENTS_TOOL,
    POLICY_TOOL,
    RESOLVE_TOOL,
    dispatched,
    documents_output,
    expanded,
    failed,
    ran,
    run_created,
    succeeded,
)

from dag.budget import Budgets
from dag.contracts import ToolCatalogue
from dag.dispatch import (
    AwaitIdentical,
    Call,
    Deny,
    Fail,
    HoldForCapacity,
    HoldForCircuit,
    Probe,
    ReuseOutput,
    Step,
    Stop,
    dispatch,
    past_deadline,
    retries,
)
from dag.events import (
    ErrorKind,
    NodeError,
    NodeFailed,
    NodeRetryScheduled,
    PlanAccepted,
    PlanningStarted,
    RunEvent,
)
from dag.fingerprint import action_fingerprint
from dag.health import ToolHealth
from dag.policy import Decision, observed_values
from dag.run_state import RunState, fold
from dag.scheduler import Expand, Frontier, Settle, Skip
from dag.states import StopReason
from mcp_server.contracts import CASEOPS_TOOLS

CASE_ARGS = {"case_id": CASE_ID}
TENANT = "tenant-a"
NOW = 1_000.0
"""The monotonic clock the tool's circuit is asked at."""


@dataclass(frozen=True)
class Withdrawn:
    """A withdrawal as the toolsets give one: its denial, and the stop reason of the run that needs the tool."""

    rule_id: str = "toolset.server_unreachable"
    stop_reason: StopReason = StopReason.TOOL_SERVER_UNREACHABLE
    detail: str = "server 'caseops' could not be listed"

    @property
    def decision(self) -> Decision:
        return Decision(allowed=False, rule_id=self.rule_id, reason=self.detail)


def node(node_id: str, tool: str = CASE_TOOL, args: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": tool, "args": CASE_ARGS if args is None else args, **extra}


def state_of(*nodes: dict[str, Any], events: tuple[RunEvent, ...] = (), **budgets: Any) -> RunState:
    return fold(
        [
            run_created(budgets=Budgets(**budgets)),
            PlanningStarted(at=AT, round=1),
            PlanAccepted(at=AT, round=1, plan={"nodes": list(nodes)}),
            *events,
        ]
    )


def steps_of(
    state: RunState,
    *,
    in_flight: int = 0,
    catalogue: ToolCatalogue = CASEOPS_TOOLS,
    withdrawn: frozenset[str] = frozenset(),
    health: ToolHealth | None = None,
    now: float = NOW,
) -> list[Step]:
    outputs = (n.output for n in state.nodes.values() if n.status.has_output and not n.is_group)
    fields = frozenset().union(*(contract.observed_bound for contract in catalogue.values()))
    return dispatch(
        state,
        Frontier().candidates(state),
        in_flight=in_flight,
        catalogue=catalogue,
        withdrawal=lambda tool, pins: Withdrawn() if tool in withdrawn else None,
        observed=observed_values(outputs, fields),
        health=health if health is not None else ToolHealth(),
        now=now,
    )


def business_failure(node_id: str) -> NodeFailed:
    error = NodeError(kind=ErrorKind.BUSINESS, code="CASE_CLOSED", message="the case is closed")
    return NodeFailed(at=AT, node_id=node_id, error=error, started_at=AT, finished_at=AT)


def resting(threshold: int = 1) -> ToolHealth:
    """A tool health whose circuit for the snapshot tool opened at ``NOW`` (for one second)."""
    health = ToolHealth(threshold=threshold, first_cooloff_s=1.0)
    error = NodeError(kind=ErrorKind.TRANSIENT, code="UPSTREAM_DOWN", message="503")
    for _ in range(threshold):
        health.record((TENANT, CASE_TOOL), error, NOW)
    return health


# ---------------------------------------------------------------- a fresh node


def test_a_ready_node_the_policy_allows_is_called_as_its_first_attempt() -> None:
    [step] = steps_of(state_of(node("case")))

    assert isinstance(step, Call)
    assert (step.node_id, step.tool, step.args, step.attempt) == ("case", CASE_TOOL, CASE_ARGS, 1)
    assert step.fingerprint == action_fingerprint(CASE_TOOL, CASE_ARGS)
    assert step.decision.allowed


def test_a_node_whose_dependency_ended_without_output_is_skipped() -> None:
    state = state_of(node("case"), node("policy", POLICY_TOOL, after=["case"]), events=tuple(_failed("case")))

    assert steps_of(state) == [Skip("policy", cause_node_id="case")]


def _failed(node_id: str) -> list[RunEvent]:
    return [dispatched(node_id, CASE_TOOL, CASE_ARGS), failed(node_id)]


def test_a_for_each_source_with_items_expands_within_the_fanout_budget() -> None:
    docs = (*ran("docs", DOCUMENTS_TOOL, CASE_ARGS, documents_output(["D-1", "D-2"])),)

    steps = steps_of(state_of(node("docs", DOCUMENTS_TOOL), _resolve_each(), events=docs))

    assert steps == [Expand("resolve", 2)]


def _resolve_each() -> dict[str, Any]:
    return node(
        "resolve",
        RESOLVE_TOOL,
        {"case_id": CASE_ID, "document_id": {"$item": "/document_id"}},
        for_each={"$ref": "docs", "pointer": "/documents"},
    )


def test_a_for_each_wider_than_max_fanout_stops_the_round_on_the_fanout_limit() -> None:
    docs = (*ran("docs", DOCUMENTS_TOOL, CASE_ARGS, documents_output(["D-1", "D-2", "D-3"])),)

    steps = steps_of(state_of(node("docs", DOCUMENTS_TOOL), _resolve_each(), events=docs, max_fanout=2))

    assert steps == [Stop(StopReason.FANOUT_LIMIT, "resolve: budget max_fanout exhausted: 3 > 2")]


def test_a_group_whose_children_all_ended_settles() -> None:
    listing = documents_output(["D-1"])
    resolved = {"case_id": CASE_ID, "document_id": "D-1"}
    events = (
        *ran("docs", DOCUMENTS_TOOL, CASE_ARGS, listing),
        expanded("resolve", 1),
        dispatched("resolve[0]", RESOLVE_TOOL, resolved),
        succeeded("resolve[0]", {"resolved": True}),
    )

    steps = steps_of(state_of(node("docs", DOCUMENTS_TOOL), _resolve_each(), events=events))

    assert steps == [Settle("resolve", succeeded=True)]


def test_a_reference_to_what_the_output_lacks_fails_the_node_unresolved() -> None:
    args = {"case_id": {"$ref": "case", "pointer": "/no_such_field"}}
    state = state_of(node("case"), node("policy", POLICY_TOOL, args), events=tuple(_ran_case()))

    [step] = steps_of(state)

    assert isinstance(step, Fail)
    assert (step.node_id, step.error.kind, step.error.code) == (
        "policy",
        ErrorKind.CONTRACT,
        "REFERENCE_UNRESOLVED",
    )


def _ran_case() -> list[RunEvent]:
    return ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT)


def test_resolved_arguments_that_do_not_fit_the_contract_fail_the_node() -> None:
    args = {"case_id": {"$ref": "case", "pointer": "/version"}}  # a number where a case id goes
    state = state_of(node("case"), node("policy", POLICY_TOOL, args), events=tuple(_ran_case()))

    [step] = steps_of(state)

    assert isinstance(step, Fail)
    assert (step.node_id, step.error.code) == ("policy", "INVALID_ARGUMENTS")


def test_an_action_the_policy_refuses_is_denied_with_its_decision() -> None:
    [step] = steps_of(state_of(node("theirs", args={"case_id": "C-999"})))

    assert isinstance(step, Deny)
    assert step.ready.node_id == "theirs"
    assert (step.decision.allowed, step.decision.rule_id) == (False, "resource.case_bound")


def test_a_withdrawn_tool_stops_the_round_after_denying_the_node() -> None:
    steps = steps_of(state_of(node("case"), node("policy", POLICY_TOOL)), withdrawn=frozenset({CASE_TOOL}))

    [stop] = steps  # "policy" comes after the stop: not decided
    assert isinstance(stop, Stop)
    assert (stop.reason, stop.detail) == (
        StopReason.TOOL_SERVER_UNREACHABLE,
        "case: server 'caseops' could not be listed",
    )
    assert isinstance(stop.last, Deny)
    assert stop.last.decision.rule_id == "toolset.server_unreachable"


def test_an_identical_action_in_flight_is_awaited() -> None:
    state = state_of(node("one"), node("two"), events=(dispatched("one", CASE_TOOL, CASE_ARGS),))

    assert steps_of(state) == [AwaitIdentical("two")]


def test_an_identical_action_decided_earlier_in_the_same_step_is_awaited() -> None:
    steps = steps_of(state_of(node("one"), node("two")))

    assert [type(step) for step in steps] == [Call, AwaitIdentical]


def test_an_identical_action_that_succeeded_is_reused() -> None:
    state = state_of(node("one"), node("two"), events=tuple(ran("one", CASE_TOOL, CASE_ARGS, CASE_OUTPUT)))

    [step] = steps_of(state)

    assert isinstance(step, ReuseOutput)
    assert (step.ready.node_id, step.source_node_id) == ("two", "one")


def test_an_identical_action_the_tool_refused_fails_without_a_call() -> None:
    events = (dispatched("one", CASE_TOOL, CASE_ARGS), business_failure("one"))

    [step] = steps_of(state_of(node("one"), node("two"), events=events))

    assert isinstance(step, Fail)
    assert (step.node_id, step.error.kind, step.error.code) == (
        "two",
        ErrorKind.BUSINESS,
        "IDENTICAL_ACTION_FAILED",
    )


def test_an_action_proposed_past_the_repeat_limit_stops_the_round() -> None:
    events = tuple(ran("one", CASE_TOOL, CASE_ARGS, CASE_OUTPUT))

    steps = steps_of(state_of(node("one"), node("two"), events=events, repeat_limit=1))

    assert steps == [
        Stop(
            StopReason.REPEATED_ACTION_FINGERPRINT,
            f"two: {CASE_TOOL} with these arguments was proposed 2 times (limit 1)",
        )
    ]


def test_runnable_nodes_beyond_max_parallel_are_held_not_resolved() -> None:
    state = state_of(node("case"), node("policy", POLICY_TOOL), node("docs", DOCUMENTS_TOOL), max_parallel=4)

    steps = steps_of(state, in_flight=3)

    assert [type(step) for step in steps] == [Call, HoldForCapacity]
    assert steps[-1] == HoldForCapacity(waiting=2)


def test_a_node_of_a_resting_tool_is_held_until_its_circuit_lets_calls_through() -> None:
    steps = steps_of(state_of(node("case"), node("policy", POLICY_TOOL)), health=resting())

    assert steps[0] == HoldForCircuit("case", seconds=1.0)
    assert isinstance(steps[1], Call)  # another tool's node goes on
    assert steps[1].node_id == "policy"


def test_the_first_call_after_the_cooloff_is_the_circuits_probe() -> None:
    steps = steps_of(state_of(node("case")), health=resting(), now=NOW + 1.0)

    assert steps[0] == Probe("case", (TENANT, CASE_TOOL))
    assert isinstance(steps[1], Call)
    assert steps[1].node_id == "case"


# ---------------------------------------------------------------- a retry


def retry_state(**budgets: Any) -> RunState:
    error = NodeError(kind=ErrorKind.TRANSIENT, code="UPSTREAM_DOWN", message="503")
    retry = NodeRetryScheduled(at=AT, node_id="case", attempt=1, error=error, delay_s=0.0)
    return state_of(
        node("case"),
        node("policy", POLICY_TOOL),
        events=(
            dispatched("case", CASE_TOOL, CASE_ARGS),
            retry,
            dispatched("policy", POLICY_TOOL, CASE_ARGS),
            NodeRetryScheduled(at=AT, node_id="policy", attempt=1, error=error, delay_s=0.0),
        ),
        **budgets,
    )


def retried(
    state: RunState,
    *,
    in_flight: int = 0,
    catalogue: ToolCatalogue = CASEOPS_TOOLS,
    withdrawn: frozenset[str] = frozenset(),
    health: ToolHealth | None = None,
) -> list[Any]:
    return list(
        retries(
            state,
            ["case", "policy"],
            in_flight=in_flight,
            catalogue=catalogue,
            withdrawal=lambda tool, pins: Withdrawn() if tool in withdrawn else None,
            observed={},
            health=health if health is not None else ToolHealth(),
            now=NOW,
        )
    )


def test_a_due_retry_is_called_again_as_its_next_attempt() -> None:
    first, second = retried(retry_state())

    assert isinstance(first, Call)
    assert (first.node_id, first.attempt, first.args) == ("case", 2, CASE_ARGS)
    assert isinstance(second, Call)
    assert second.node_id == "policy"


def test_due_retries_wait_for_room_under_max_parallel() -> None:
    steps = retried(retry_state(max_parallel=2), in_flight=1)

    assert [step.node_id for step in steps] == ["case"]


def test_a_retry_the_policy_now_refuses_fails_with_the_denial() -> None:
    without_snapshot = {name: c for name, c in CASEOPS_TOOLS.items() if name != CASE_TOOL}

    first, second = retried(retry_state(), catalogue=without_snapshot)

    assert first == Fail(
        "case",
        NodeError(
            kind=ErrorKind.AUTHORIZATION,
            code="tool.not_in_catalogue",
            message=f"tool {CASE_TOOL!r} is not available",
        ),
    )
    assert isinstance(second, Call)


def test_a_retry_of_a_withdrawn_tool_fails_and_stops_the_round() -> None:
    steps = retried(retry_state(), withdrawn=frozenset({CASE_TOOL}))

    [stop] = steps
    assert isinstance(stop, Stop)
    assert (stop.reason, stop.detail) == (
        StopReason.TOOL_SERVER_UNREACHABLE,
        "case: server 'caseops' could not be listed",
    )
    assert isinstance(stop.last, Fail)
    assert (stop.last.error.kind, stop.last.error.code) == (
        ErrorKind.AUTHORIZATION,
        "toolset.server_unreachable",
    )


def test_a_retry_of_a_resting_tool_is_held_and_the_next_goes_on() -> None:
    first, second = retried(retry_state(), health=resting())

    assert first == HoldForCircuit("case", seconds=1.0)
    assert isinstance(second, Call)


# ---------------------------------------------------------------- the deadline


def test_the_round_stops_once_the_runs_deadline_has_passed() -> None:
    state = state_of(node("case"), deadline_s=30.0)

    assert past_deadline(state, AT + timedelta(seconds=29.9)) is None
    assert past_deadline(state, AT + timedelta(seconds=30)) == Stop(
        StopReason.DEADLINE_EXCEEDED, "the run's deadline of 30s passed"
    )

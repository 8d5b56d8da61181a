"""``apply`` and ``fold``: the pure reducer that is the only way a run's state changes."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest
from dag_run_builders import (
    ALLOW,
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    DOCUMENT_IDS,
    DOCUMENTS_TOOL,
    POLICY_TOOL,
    RESOLVE_TOOL,
    accepted_events,
    dispatched,
    documents_output,
    expanded,
    failed,
    ran,
    reads_done,
    resolution_output,
    resolve_args_of,
    run_created,
    running,
    succeeded,
)

from dag.errors import EventRefused, IllegalTransition
from dag.events import (
    GroupSettled,
    JoinStarted,
    NodeReused,
    PlanAccepted,
    PlanningStarted,
    RunCreated,
    RunEvent,
    RunFinished,
    RunParked,
    RunWaiting,
    RunWoken,
    event_from_json,
    event_to_json,
)
from dag.fingerprint import action_fingerprint
from dag.run_state import NodeState, RunState, _evolve, apply, fold
from dag.states import NodeStatus, RunStatus, StopReason

RESOLUTIONS = [
    resolution_output(document_id, f"CODE_{index}") for index, document_id in enumerate(DOCUMENT_IDS)
]


def whole_run(plan: dict[str, Any]) -> list[RunEvent]:
    """Every event of a document check that completes; children finish in reverse order."""
    return [
        *accepted_events(plan),
        *reads_done(),
        expanded("resolve", 3),
        *[
            dispatched(f"resolve[{index}]", RESOLVE_TOOL, resolve_args_of(doc))
            for index, doc in enumerate(DOCUMENT_IDS)
        ],
        *[succeeded(f"resolve[{index}]", RESOLUTIONS[index]) for index in (2, 1, 0)],
        GroupSettled(at=AT, node_id="resolve", succeeded=True),
        JoinStarted(at=AT, round=1),
        RunFinished(at=AT, status=RunStatus.COMPLETED, result={"outcome": "DOCUMENTS_COMPLETE"}),
    ]


def statuses(state: RunState) -> dict[str, NodeStatus]:
    return {node_id: state.nodes[node_id].status for node_id in state.order}


def test_a_run_starts_pending_with_the_principal_of_its_creation() -> None:
    state = fold([run_created()])

    assert state.status is RunStatus.PENDING
    assert (state.principal.tenant_id, state.principal.subject) == ("tenant-a", "adjuster-7")
    assert state.principal.scopes == frozenset(
        {"cases:read", "policies:read", "documents:read", "documents:request"}
    )
    assert (state.resource, state.plan, state.nodes) == ({"case_id": CASE_ID}, None, {})


def test_an_accepted_plan_makes_every_node_pending_in_plan_order(example_plan: dict[str, Any]) -> None:
    state = running(example_plan)

    assert (state.status, state.round) == (RunStatus.RUNNING, 1)
    assert statuses(state) == dict.fromkeys(["case", "policy", "docs", "resolve"], NodeStatus.PENDING)
    assert state.nodes["resolve"].children == ()
    assert state.nodes["case"].children is None
    assert state.node_count() == 4


def test_a_run_must_start_with_run_created() -> None:
    with pytest.raises(EventRefused, match="first event must be run_created"):
        fold([PlanningStarted(at=AT, round=1)])
    with pytest.raises(EventRefused, match="may only start a run"):
        fold([run_created(), run_created()])
    with pytest.raises(EventRefused, match="at least one event"):
        fold([])


def test_a_dispatch_records_args_fingerprint_decision_and_claims_the_fingerprint(
    example_plan: dict[str, Any],
) -> None:
    args = {"case_id": CASE_ID}
    state = running(example_plan, dispatched("case", CASE_TOOL, args))

    case = state.nodes["case"]
    assert (case.status, case.args, case.decision, case.attempts) == (NodeStatus.RUNNING, args, ALLOW, 1)
    assert state.fingerprints == {action_fingerprint(CASE_TOOL, args): "case"}
    assert [node.node_id for node in state.in_flight()] == ["case"]


def test_the_first_dispatch_of_a_fingerprint_keeps_the_claim() -> None:
    args = {"case_id": CASE_ID}
    plan = {
        "nodes": [
            {"id": "one", "tool": CASE_TOOL, "args": args},
            {"id": "two", "tool": CASE_TOOL, "args": args},
        ]
    }

    state = running(plan, dispatched("one", CASE_TOOL, args), dispatched("two", CASE_TOOL, args))

    assert state.fingerprints == {action_fingerprint(CASE_TOOL, args): "one"}


def test_a_reused_node_takes_the_output_of_its_source() -> None:
    args = {"case_id": CASE_ID}
    plan = {
        "nodes": [
            {"id": "one", "tool": CASE_TOOL, "args": args},
            {"id": "two", "tool": CASE_TOOL, "args": args},
        ]
    }
    reuse = NodeReused(
        at=AT,
        node_id="two",
        tool=CASE_TOOL,
        args=args,
        fingerprint=action_fingerprint(CASE_TOOL, args),
        source_node_id="one",
    )

    state = running(plan, dispatched("one", CASE_TOOL, args), succeeded("one", CASE_OUTPUT), reuse)

    two = state.nodes["two"]
    assert (two.status, two.output, two.reused_from) == (NodeStatus.REUSED, CASE_OUTPUT, "one")
    assert state.output_of("two") == CASE_OUTPUT


def test_reusing_a_node_without_output_is_refused() -> None:
    args = {"case_id": CASE_ID}
    plan = {
        "nodes": [
            {"id": "one", "tool": CASE_TOOL, "args": args},
            {"id": "two", "tool": CASE_TOOL, "args": args},
        ]
    }
    reuse = NodeReused(at=AT, node_id="two", tool=CASE_TOOL, args=args, fingerprint="f", source_node_id="one")

    with pytest.raises(EventRefused, match="no output"):
        running(plan, dispatched("one", CASE_TOOL, args), failed("one"), reuse)


def test_expansion_adds_indexed_children_after_the_plan_nodes(example_plan: dict[str, Any]) -> None:
    state = running(example_plan, *reads_done(), expanded("resolve", 3))

    assert state.order[4:] == ("resolve[0]", "resolve[1]", "resolve[2]")
    assert state.nodes["resolve"].status is NodeStatus.RUNNING
    assert state.nodes["resolve"].children == ("resolve[0]", "resolve[1]", "resolve[2]")
    child = state.nodes["resolve[1]"]
    assert (child.parent, child.index, child.tool, child.plan_node_id) == (
        "resolve",
        1,
        RESOLVE_TOOL,
        "resolve",
    )
    assert state.node_count() == 7


def test_output_of_a_group_lists_its_childrens_outputs_in_index_order(example_plan: dict[str, Any]) -> None:
    state = fold(whole_run(example_plan))

    assert state.output_of("resolve") == RESOLUTIONS
    assert state.output_of("docs")["documents"][0]["document_id"] == "D-1"


def test_a_completed_run_has_every_node_ended_with_an_output(example_plan: dict[str, Any]) -> None:
    state = fold(whole_run(example_plan))

    assert state.status is RunStatus.COMPLETED
    assert set(statuses(state).values()) == {NodeStatus.SUCCEEDED}
    assert state.result == {"outcome": "DOCUMENTS_COMPLETE"}


def test_run_finished_cancels_every_open_node_and_keeps_ended_ones(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        dispatched("case", CASE_TOOL, {"case_id": CASE_ID}),
        succeeded("case", CASE_OUTPUT),
        dispatched("policy", POLICY_TOOL, {"case_id": CASE_ID}),
        RunFinished(
            at=AT, status=RunStatus.STOPPED, stop_reason=StopReason.NODE_BUDGET_EXHAUSTED, detail="d"
        ),
    )

    assert (state.status, state.stop_reason, state.finished_at) == (
        RunStatus.STOPPED,
        StopReason.NODE_BUDGET_EXHAUSTED,
        AT,
    )
    assert statuses(state) == {
        "case": NodeStatus.SUCCEEDED,
        "policy": NodeStatus.CANCELLED,
        "docs": NodeStatus.CANCELLED,
        "resolve": NodeStatus.CANCELLED,
    }
    assert state.in_flight() == []


def test_run_finished_cancels_a_running_group_and_its_open_children(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        *reads_done(),
        expanded("resolve", 2),
        dispatched("resolve[0]", RESOLVE_TOOL, resolve_args_of("D-1")),
        RunFinished(at=AT, status=RunStatus.CANCELLED),
    )

    assert {node_id: state.nodes[node_id].status for node_id in ("resolve", "resolve[0]", "resolve[1]")} == {
        "resolve": NodeStatus.CANCELLED,
        "resolve[0]": NodeStatus.CANCELLED,
        "resolve[1]": NodeStatus.CANCELLED,
    }


def test_run_finished_with_a_non_terminal_status_is_refused(example_plan: dict[str, Any]) -> None:
    with pytest.raises(EventRefused, match="terminal status"):
        running(example_plan, RunFinished(at=AT, status=RunStatus.JOINING))


def test_a_node_succeeding_without_being_dispatched_is_an_illegal_transition(
    example_plan: dict[str, Any],
) -> None:
    with pytest.raises(IllegalTransition) as caught:
        running(example_plan, succeeded("case", CASE_OUTPUT))

    assert (caught.value.entity, caught.value.source, caught.value.target) == ("node", "pending", "succeeded")


def test_a_node_dispatched_twice_is_an_illegal_transition(example_plan: dict[str, Any]) -> None:
    first = dispatched("case", CASE_TOOL, {"case_id": CASE_ID})
    again = first.model_copy(update={"attempt": 2})  # the attempt number a retry would carry

    with pytest.raises(IllegalTransition) as caught:
        running(example_plan, first, again)

    assert (caught.value.entity, caught.value.source, caught.value.target) == ("node", "running", "running")


def test_completing_a_run_that_never_joined_is_an_illegal_transition(example_plan: dict[str, Any]) -> None:
    with pytest.raises(IllegalTransition) as caught:
        running(example_plan, RunFinished(at=AT, status=RunStatus.COMPLETED))

    assert (caught.value.entity, caught.value.source, caught.value.target) == ("run", "running", "completed")


def test_accepting_a_plan_before_planning_is_an_illegal_transition(example_plan: dict[str, Any]) -> None:
    with pytest.raises(IllegalTransition) as caught:
        fold([run_created(), PlanAccepted(at=AT, round=0, plan=example_plan)])

    assert (caught.value.entity, caught.value.source, caught.value.target) == ("run", "pending", "running")


def test_folding_the_same_events_twice_gives_equal_states(example_plan: dict[str, Any]) -> None:
    events = whole_run(example_plan)

    first, second = fold(events), fold(events)

    assert first == second
    assert first is not second


def test_fold_is_apply_from_nothing(example_plan: dict[str, Any]) -> None:
    events = whole_run(example_plan)

    assert functools.reduce(apply, events, None) == fold(events)


def test_a_run_rebuilt_from_stored_events_equals_the_live_run(example_plan: dict[str, Any]) -> None:
    events = whole_run(example_plan)

    stored = [event_from_json(event_to_json(event)) for event in events]

    assert fold(stored) == fold(events)


def test_apply_leaves_the_previous_state_unchanged(example_plan: dict[str, Any]) -> None:
    before = running(example_plan)

    after = apply(before, dispatched("case", CASE_TOOL, {"case_id": CASE_ID}))

    assert before.nodes["case"].status is NodeStatus.PENDING
    assert before.fingerprints == {}
    assert after.nodes["case"].status is NodeStatus.RUNNING


def test_expansion_inserts_the_children_right_after_their_parent_not_at_the_end() -> None:
    plan = {
        "nodes": [
            {"id": "docs", "tool": DOCUMENTS_TOOL, "args": {"case_id": CASE_ID}},
            {
                "id": "resolve",
                "tool": RESOLVE_TOOL,
                "for_each": {"$ref": "docs", "pointer": "/documents"},
                "args": {"case_id": CASE_ID, "document_id": {"$item": "/document_id"}},
            },
            {"id": "case", "tool": CASE_TOOL, "args": {"case_id": CASE_ID}},
        ]
    }
    docs_output = documents_output(["D-1", "D-2"])

    state = running(
        plan, *ran("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}, docs_output), expanded("resolve", 2)
    )

    assert state.order == ("docs", "resolve", "resolve[0]", "resolve[1]", "case")


def test_a_dispatch_must_carry_the_next_attempt_number(example_plan: dict[str, Any]) -> None:
    skipping = dispatched("case", CASE_TOOL, {"case_id": CASE_ID}).model_copy(update={"attempt": 2})

    with pytest.raises(ValueError, match="case: attempt 2 after 0"):
        running(example_plan, skipping)


def test_a_run_keeps_the_stage_and_tenant_catalogue_it_was_created_with() -> None:
    created = run_created().model_copy(update={"stage": "review", "tenant_tools": (CASE_TOOL, POLICY_TOOL)})

    state = fold([created])

    assert (state.stage, state.tenant_tools) == ("review", frozenset({CASE_TOOL, POLICY_TOOL}))
    assert (state.authority.stage, state.authority.tenant_tools) == ("review", state.tenant_tools)
    assert state.authority.principal == state.principal


def test_a_run_created_without_a_tenant_catalogue_grants_every_tool() -> None:
    state = fold([run_created()])

    assert (state.stage, state.tenant_tools) == ("investigate", None)


def test_a_run_created_event_stored_before_runs_named_a_resource_reads_as_a_case_resource(
    example_plan: dict[str, Any],
) -> None:
    # The shape events had before `resource`: a bare `case_id` field, which was the run's only binding.
    old = event_to_json(run_created())
    old["case_id"] = old.pop("resource")["case_id"]

    created = event_from_json(old)
    state = fold([created, *accepted_events(example_plan)[1:]])

    assert isinstance(created, RunCreated)
    assert created.resource == {"case_id": CASE_ID}
    assert "case_id" not in event_to_json(created)
    assert state.authority.resource == {"case_id": CASE_ID}
    assert state == fold(accepted_events(example_plan))


def test_a_run_created_event_naming_both_a_case_and_a_resource_is_refused() -> None:
    both = {**event_to_json(run_created()), "case_id": "C-999"}

    with pytest.raises(ValueError, match="case_id"):
        event_from_json(both)


def test_a_transition_leaves_the_state_it_was_applied_to_as_it_was(example_plan: dict[str, Any]) -> None:
    """The reducer copies states without re-running their constructors; a copy must never share a changed
    field with the original: a supervisor keeps the stored state while it applies staged events on top."""
    before = running(example_plan)
    nodes_before = dict(before.nodes)
    after = apply(before, dispatched("case", CASE_TOOL, {"case_id": CASE_ID}))
    assert before.nodes == nodes_before
    assert before.nodes["case"].status is NodeStatus.PENDING
    assert after.nodes["case"].status is NodeStatus.RUNNING
    assert after.proposals == {after.nodes["case"].fingerprint: 1}
    assert not before.proposals


@pytest.mark.parametrize("cls", [RunState, NodeState])
def test_the_reducers_states_have_no_post_init_for_their_copies_to_skip(cls: type) -> None:
    """``_evolve`` copies fields without calling ``__init__``: a ``__post_init__`` added later would be skipped."""
    assert not hasattr(cls, "__post_init__")


def test_copying_a_state_with_a_field_it_does_not_have_is_an_error(example_plan: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match="no fields"):
        _evolve(running(example_plan), statsu=RunStatus.RUNNING)


# ---------------------------------------------------------------- parked: waiting for people and nothing else


def waiting_run(example_plan: dict[str, Any]) -> RunState:
    return running(example_plan, RunWaiting(at=AT, operation_ids=("op-1",), reason="awaiting approval"))


def test_a_parked_runs_clock_stands_still_until_it_is_woken(example_plan: dict[str, Any]) -> None:
    parked_at, woken_at = AT + timedelta(seconds=10), AT + timedelta(hours=30)
    parked = apply(waiting_run(example_plan), RunParked(at=parked_at, waits=("operation:op-1",)))

    assert parked.parked_since == parked_at
    assert parked.active_s(AT + timedelta(days=3)) == 10  # whatever the hour: it has worked 10 s
    woken = apply(parked, RunWoken(at=woken_at, owner="sup"))
    assert (woken.parked_since, woken.parked_s) == (None, 30 * 3600 - 10)
    assert woken.active_s(woken_at + timedelta(seconds=5)) == 15
    assert woken.deadline == woken.budgets.deadline_of(AT) + timedelta(seconds=30 * 3600 - 10)


def test_only_a_waiting_run_parks_and_nothing_happens_to_a_parked_run_before_it_is_woken(
    example_plan: dict[str, Any],
) -> None:
    parked = apply(waiting_run(example_plan), RunParked(at=AT, waits=("operation:op-1",)))

    with pytest.raises(EventRefused):
        apply(running(example_plan), RunParked(at=AT, waits=()))
    with pytest.raises(EventRefused):
        apply(parked, RunParked(at=AT, waits=()))
    with pytest.raises(EventRefused):
        apply(parked, RunFinished(at=AT, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED))
    with pytest.raises(EventRefused):
        apply(waiting_run(example_plan), RunWoken(at=AT, owner="sup"))

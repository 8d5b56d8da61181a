"""The run and node transition tables: the only place that decides which state changes are legal."""

from __future__ import annotations

import pytest
from dag_run_builders import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from dag.errors import IllegalTransition
from dag.states import (
    NODE_TRANSITIONS,
    RUN_TRANSITIONS,
    TERMINAL_NODE_STATUSES,
    TERMINAL_RUN_STATUSES,
    NodeStatus,
    RunStatus,
    check_node_transition,
    check_run_transition,
)

LEGAL_RUN = [(source, target) for source, targets in RUN_TRANSITIONS.items() for target in sorted(targets)]
LEGAL_NODE = [(source, target) for source, targets in NODE_TRANSITIONS.items() for target in sorted(targets)]


def test_both_tables_name_every_status() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    assert set(NODE_TRANSITIONS) == set(NodeStatus)


@pytest.mark.parametrize(("source", "target"), LEGAL_RUN, ids=[f"{s}->{t}" for s, t in LEGAL_RUN])
def test_every_run_transition_in_the_table_is_allowed(source: RunStatus, target: RunStatus) -> None:
    check_run_transition(source, target)


@pytest.mark.parametrize(("source", "target"), LEGAL_NODE, ids=[f"{s}->{t}" for s, t in LEGAL_NODE])
def test_every_node_transition_in_the_table_is_allowed(source: NodeStatus, target: NodeStatus) -> None:
    check_node_transition(source, target)


illegal_run_pairs = st.tuples(st.sampled_from(RunStatus), st.sampled_from(RunStatus)).filter(
    lambda pair: pair[1] not in RUN_TRANSITIONS[pair[0]]
)
illegal_node_pairs = st.tuples(st.sampled_from(NodeStatus), st.sampled_from(NodeStatus)).filter(
    lambda pair: pair[1] not in NODE_TRANSITIONS[pair[0]]
)


@PROPERTY_SETTINGS
@given(pair=illegal_run_pairs)
def test_a_run_transition_outside_the_table_raises_illegal_transition(
    pair: tuple[RunStatus, RunStatus],
) -> None:
    source, target = pair
    with pytest.raises(IllegalTransition) as caught:
        check_run_transition(source, target)

    assert (caught.value.entity, caught.value.source, caught.value.target) == (
        "run",
        source.value,
        target.value,
    )


@PROPERTY_SETTINGS
@given(pair=illegal_node_pairs)
def test_a_node_transition_outside_the_table_raises_illegal_transition(
    pair: tuple[NodeStatus, NodeStatus],
) -> None:
    source, target = pair
    with pytest.raises(IllegalTransition) as caught:
        check_node_transition(source, target)

    assert (caught.value.entity, caught.value.source, caught.value.target) == (
        "node",
        source.value,
        target.value,
    )


def test_no_status_may_transition_to_itself() -> None:
    assert [status for status in RunStatus if status in RUN_TRANSITIONS[status]] == []
    assert [status for status in NodeStatus if status in NODE_TRANSITIONS[status]] == []


def test_terminal_statuses_are_exactly_those_without_outgoing_transitions() -> None:
    assert {status for status, targets in RUN_TRANSITIONS.items() if not targets} == TERMINAL_RUN_STATUSES
    assert {status for status, targets in NODE_TRANSITIONS.items() if not targets} == TERMINAL_NODE_STATUSES
    assert {status for status in RunStatus if status.terminal} == TERMINAL_RUN_STATUSES
    assert {status for status in NodeStatus if status.terminal} == TERMINAL_NODE_STATUSES


def test_only_succeeded_and_reused_nodes_have_an_output() -> None:
    assert {status for status in NodeStatus if status.has_output} == {NodeStatus.SUCCEEDED, NodeStatus.REUSED}


def test_every_non_terminal_status_can_still_be_stopped() -> None:
    endings = {RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.STOPPED}
    assert [run for run in RunStatus if not run.terminal and not endings <= RUN_TRANSITIONS[run]] == []
    assert [
        node
        for node in NodeStatus
        if not node.terminal and NodeStatus.CANCELLED not in NODE_TRANSITIONS[node]
    ] == []

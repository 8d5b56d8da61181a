"""The outputs planner: every node's output is the result, once every node has one."""

from __future__ import annotations

import pytest

from dag.events import ErrorKind, NodeError
from dag.states import NodeStatus, StopReason
from planner.base import Final, NeedsHuman, Observation, PlanningContext, Uncalled
from planner.outputs import OutputsPlanner, PlanRequired, outputs_of


def test_every_node_with_an_output_makes_the_result() -> None:
    decision = outputs_of(
        [
            Observation("a", "echo", {"text": "x"}, NodeStatus.SUCCEEDED, {"text": "x"}),
            Observation("b", "echo", {"text": "x"}, NodeStatus.REUSED, {"text": "x"}),
        ]
    )

    assert decision == Final(result={"outputs": {"a": {"text": "x"}, "b": {"text": "x"}}}, citations=())


def test_a_node_without_an_output_is_named_and_no_result_is_given() -> None:
    error = NodeError(kind=ErrorKind.PROTOCOL, code="OUTPUT_SCHEMA_MISMATCH", message="m")
    decision = outputs_of(
        [
            Observation("a", "echo", {}, NodeStatus.SUCCEEDED, {"text": "x"}),
            Observation("b", "echo", {}, NodeStatus.FAILED, error=error),
        ]
    )

    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.EVIDENCE_INCOMPLETE
    assert decision.detail == "1 node(s) have no output: b (OUTPUT_SCHEMA_MISMATCH)"


async def test_it_proposes_no_plan() -> None:
    context = PlanningContext(resource={}, goal="g", tools=[], round=1, observations=(), replan_reason=None)

    with pytest.raises(PlanRequired):
        await OutputsPlanner().propose(context)


def test_a_node_that_ended_without_a_call_leaves_the_outputs_unanswered() -> None:
    """A node whose argument could not be resolved (or that was skipped) has no observation; the outputs
    planner still owes it an output, so it does not complete without it."""
    called = Observation("a", "echo", {"text": "x"}, NodeStatus.SUCCEEDED, {"text": "x"})
    unresolved = NodeError(kind=ErrorKind.PROTOCOL, code="FOR_EACH_NOT_A_LIST", message="m")

    decision = outputs_of(
        [called],
        uncalled=[
            Uncalled("b", "echo", NodeStatus.FAILED, unresolved),
            Uncalled("c", "echo", NodeStatus.SKIPPED),
        ],
    )

    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.EVIDENCE_INCOMPLETE
    assert decision.detail == (
        "2 node(s) have no output: b (never called: FOR_EACH_NOT_A_LIST), c (never called: skipped)"
    )

"""Replan rounds in the pure core: namespaced node ids, references to earlier rounds, and stale rounds."""

from __future__ import annotations

from typing import Any

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    DOCUMENTS_TOOL,
    POLICY_OUTPUT,
    POLICY_TOOL,
    RESOLVE_TOOL,
    accepted_events,
    dispatched,
    documents_output,
    ran,
    resolution_output,
    resolve_args_of,
)

from dag.errors import EventRefused, PlanErrorCode, PlanInvalid
from dag.events import JoinStarted, NodeReused, PlanAccepted, PlanningStarted, RunEvent
from dag.fingerprint import action_fingerprint
from dag.plan import Plan, qualified_id, qualify
from dag.run_state import RunState, fold
from dag.scheduler import Ready, next_steps
from dag.states import NodeStatus, RunStatus
from dag.validate import validate_plan
from mcp_server.contracts import CASEOPS_TOOLS

CASE_ARGS = {"case_id": CASE_ID}
ROUND_ONE = {
    "nodes": [
        {"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS},
        {"id": "docs", "tool": DOCUMENTS_TOOL, "args": CASE_ARGS},
    ]
}
FIRST_DOCUMENT = {"$ref": "r1.docs", "pointer": "/documents/0/document_id"}


def round_one_done() -> list[RunEvent]:
    """Round 1 ran ``case`` and ``docs`` (listing D-1) and joined."""
    return [
        *accepted_events(ROUND_ONE),
        *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
        *ran("docs", DOCUMENTS_TOOL, CASE_ARGS, documents_output(["D-1"])),
        JoinStarted(at=AT, round=1),
    ]


def replanned(plan: dict[str, Any], *more: RunEvent) -> RunState:
    """Round 2 of ``plan`` accepted after round 1."""
    return fold(
        [*round_one_done(), PlanningStarted(at=AT, round=2), PlanAccepted(at=AT, round=2, plan=plan), *more]
    )


def validate_round(nodes: list[dict[str, Any]], round_number: int, earlier: frozenset[str]) -> Plan:
    plan = Plan.parse({"nodes": nodes})
    return validate_plan(plan, CASEOPS_TOOLS, max_nodes=64, round_number=round_number, earlier=earlier)


def resolve_node(node_id: str, document_id: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": RESOLVE_TOOL, "args": {"case_id": CASE_ID, "document_id": document_id}}


# ---------------------------------------------------------------- naming


@pytest.mark.parametrize(
    ("round_number", "node_id", "qualified"),
    [(1, "docs", "docs"), (2, "docs", "r2.docs"), (12, "resolve", "r12.resolve")],
)
def test_round_one_keeps_its_ids_and_later_rounds_are_namespaced(
    round_number: int, node_id: str, qualified: str
) -> None:
    assert qualified_id(round_number, node_id) == qualified


@pytest.mark.parametrize(
    ("target", "round_number", "run_id"),
    [("r1.docs", 2, "docs"), ("docs", 2, "r2.docs"), ("r2.check", 3, "r2.check"), ("docs", 1, "docs")],
)
def test_a_reference_names_its_own_rounds_node_or_an_earlier_rounds(
    target: str, round_number: int, run_id: str
) -> None:
    assert qualify(target, round_number) == run_id


# ---------------------------------------------------------------- validation of a replan


def test_a_replan_may_reference_an_earlier_rounds_node() -> None:
    plan = validate_round([resolve_node("resolve", FIRST_DOCUMENT)], 2, frozenset({"r1.case", "r1.docs"}))

    assert [node.id for node in plan.nodes] == ["resolve"]


@pytest.mark.parametrize(
    ("target", "round_number", "earlier"),
    [
        pytest.param("r1.ghost", 2, frozenset({"r1.docs"}), id="not-in-the-earlier-round"),
        pytest.param("r2.docs", 2, frozenset({"r1.docs", "r2.docs"}), id="own-round-by-prefix"),
        pytest.param("r3.docs", 2, frozenset({"r3.docs"}), id="a-later-round"),
        pytest.param("r1.docs", 1, frozenset({"r1.docs"}), id="round-one-has-no-earlier"),
    ],
)
def test_a_reference_to_a_round_that_is_not_earlier_or_a_node_it_lacks_is_unknown(
    target: str, round_number: int, earlier: frozenset[str]
) -> None:
    reference = {"$ref": target, "pointer": "/documents/0/document_id"}

    with pytest.raises(PlanInvalid) as caught:
        validate_round([resolve_node("resolve", reference)], round_number, earlier)

    assert (caught.value.code, caught.value.node_id) == (PlanErrorCode.UNKNOWN_REFERENCE, "resolve")
    assert caught.value.location == "/nodes/0/args/document_id"


def test_a_replan_node_may_wait_on_an_earlier_round_with_after() -> None:
    nodes = [{"id": "policy", "tool": POLICY_TOOL, "args": CASE_ARGS, "after": ["r1.case"]}]

    assert validate_round(nodes, 2, frozenset({"r1.case"})).nodes[0].after == ("r1.case",)


# ---------------------------------------------------------------- the reducer and the scheduler


def test_a_replan_adds_namespaced_nodes_after_the_first_rounds() -> None:
    state = replanned({"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]})

    assert (state.status, state.round) == (RunStatus.RUNNING, 2)
    assert state.order == ("case", "docs", "r2.case")
    node = state.nodes["r2.case"]
    assert (node.round, node.plan_node_id, node.status) == (2, "case", NodeStatus.PENDING)
    assert [len(plan.nodes) for plan in state.plans] == [2, 1]
    assert state.plan == state.plans[0]
    assert state.spec_of(node) == state.specs["r2.case"]
    assert state.earlier_names() == frozenset({"r1.case", "r1.docs", "r2.case"})


def test_a_replan_node_resolves_a_reference_to_an_earlier_rounds_output() -> None:
    state = replanned({"nodes": [resolve_node("resolve", FIRST_DOCUMENT)]})

    args = resolve_args_of("D-1")
    assert next_steps(state) == [
        Ready("r2.resolve", RESOLVE_TOOL, args, action_fingerprint(RESOLVE_TOOL, args))
    ]


def test_a_replan_node_names_its_own_rounds_nodes_without_a_prefix() -> None:
    plan = {
        "nodes": [
            {"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS},
            {
                "id": "policy",
                "tool": POLICY_TOOL,
                "args": {"case_id": {"$ref": "case", "pointer": "/case_id"}},
            },
        ]
    }
    state = replanned(plan)

    assert [step.node_id for step in next_steps(state)] == ["r2.case"]  # r2.policy waits on r2.case


def test_a_plan_for_another_round_than_the_current_one_is_refused() -> None:
    with pytest.raises(EventRefused, match="plan for round 1 accepted during round 2"):
        fold(
            [*round_one_done(), PlanningStarted(at=AT, round=2), PlanAccepted(at=AT, round=1, plan=ROUND_ONE)]
        )


def test_the_first_round_never_counts_as_without_new_evidence() -> None:
    state = fold(round_one_done())

    assert state.rounds_without_new_evidence() == 0


def test_a_replan_round_that_only_reuses_earlier_outputs_adds_no_new_evidence() -> None:
    reuse = NodeReused(
        at=AT,
        node_id="r2.case",
        tool=CASE_TOOL,
        args=CASE_ARGS,
        fingerprint=action_fingerprint(CASE_TOOL, CASE_ARGS),
        source_node_id="case",
    )

    state = replanned({"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]}, reuse)

    assert state.nodes["r2.case"].status is NodeStatus.REUSED
    assert state.rounds_without_new_evidence() == 1


def test_a_replan_round_with_a_fresh_output_adds_new_evidence() -> None:
    state = replanned(
        {"nodes": [{"id": "policy", "tool": POLICY_TOOL, "args": CASE_ARGS}]},
        *ran("r2.policy", POLICY_TOOL, CASE_ARGS, POLICY_OUTPUT),
    )

    assert state.rounds_without_new_evidence() == 0


def test_a_replan_round_still_running_counts_as_without_new_evidence_so_far() -> None:
    state = replanned(
        {"nodes": [resolve_node("resolve", FIRST_DOCUMENT)]},
        dispatched("r2.resolve", RESOLVE_TOOL, resolve_args_of("D-1")),
    )

    assert state.rounds_without_new_evidence() == 1


def test_proposals_count_each_decided_fingerprint_across_rounds() -> None:
    fingerprint = action_fingerprint(CASE_TOOL, CASE_ARGS)
    reuse = NodeReused(
        at=AT,
        node_id="r2.case",
        tool=CASE_TOOL,
        args=CASE_ARGS,
        fingerprint=fingerprint,
        source_node_id="case",
    )

    state = replanned({"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]}, reuse)

    assert state.proposals[fingerprint] == 2
    assert state.fingerprints[fingerprint] == "case"  # the executing node keeps the claim


def test_resolution_outputs_of_later_rounds_are_outputs_like_any_other() -> None:
    output = resolution_output("D-1", "CLAIM_FORM")
    state = replanned(
        {"nodes": [resolve_node("resolve", FIRST_DOCUMENT)]},
        *ran("r2.resolve", RESOLVE_TOOL, resolve_args_of("D-1"), output),
    )

    assert state.output_of("r2.resolve") == output

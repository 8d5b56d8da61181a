"""RunDriver across rounds: replans, their budgets, the repeat limit, verified answers and what the planner sees."""

from __future__ import annotations

import time
from typing import Any

from dag.budget import Budgets
from dag.events import (
    ErrorKind,
    NodeDenied,
    NodeDispatched,
    NodeError,
    NodeReused,
    PlanAccepted,
    PlanningStarted,
)
from dag.health import ToolHealth
from dag.states import NodeStatus, RunStatus, StopReason
from mcp_server.contracts import ALL_SCOPES, SCOPE_CASES, SCOPE_DOCUMENTS
from mcp_server.planner import CASE_TOOL, DOCUMENTS_TOOL, POLICY_TOOL, RESOLVE_TOOL
from planner import Final, NeedsHuman, Replan
from tests.c102 import CASE_OUTPUT, DOCS_OUTPUT, POLICY_OUTPUT, RESOLVE_OUTPUT
from tests.run_fakes import (
    CASE_ARGS,
    CASE_ID,
    RESOLVE_ARGS,
    TENANT,
    Decide,
    Propose,
    RecordingSink,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    drive,
    driver,
    only,
    policy_node,
    run_created,
    snapshot_node,
)

CASE_REF = CASE_OUTPUT["evidence_ref"]
POLICY_REF = POLICY_OUTPUT["evidence_ref"]
EVIDENCE_REF = RESOLVE_OUTPUT["source_ref"]


def listing_node(node_id: str) -> dict[str, Any]:
    return {"id": node_id, "tool": DOCUMENTS_TOOL, "args": dict(CASE_ARGS)}


def resolve_node(node_id: str, document_id: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": RESOLVE_TOOL, "args": {"case_id": CASE_ID, "document_id": document_id}}


def plan(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": list(nodes)}


def verified(*citations: str) -> Final:
    return Final({"cited": list(citations)}, citations=list(citations))


# ---------------------------------------------------------------- replans


async def test_a_replan_runs_round_two_as_r2_nodes_that_use_round_one_outputs_and_reuse_its_actions() -> None:
    first_document = {"$ref": "r1.docs", "pointer": "/documents/0/document_id"}
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"), listing_node("docs"))),
        Decide(Replan("resolve the unclassified document")),
        Propose(plan(snapshot_node("case"), resolve_node("resolve", first_document))),
        Decide(verified(CASE_REF, EVIDENCE_REF)),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "docs", "resolve[0]"))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.round) == (RunStatus.COMPLETED, 2)
    assert final.order == ("case", "docs", "r2.case", "r2.resolve")
    assert [event.round for event in sink.of(PlanningStarted)] == [1, 2]
    assert [event.round for event in sink.of(PlanAccepted)] == [1, 2]
    assert executor.called == ["case", "docs", "r2.resolve"]  # each action executed once
    [reused] = sink.of(NodeReused)
    assert (reused.node_id, reused.source_node_id) == ("r2.case", "case")
    assert final.nodes["r2.case"].status is NodeStatus.REUSED
    assert final.nodes["r2.resolve"].args == RESOLVE_ARGS  # the document id came from round 1's listing
    assert final.nodes["r2.resolve"].output == RESOLVE_OUTPUT
    second = planner.proposing[1]
    assert (second.round, second.replan_reason) == (2, "resolve the unclassified document")
    assert [(o.node_id, o.status) for o in second.observations] == [
        ("case", NodeStatus.SUCCEEDED),
        ("docs", NodeStatus.SUCCEEDED),
    ]
    assert second.observations[1].output == DOCS_OUTPUT
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_replans_beyond_max_replans_stop_the_run_with_replan_limit() -> None:
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"))),
        Decide(Replan("need the policy")),
        Propose(plan(policy_node("policy"))),
        Decide(Replan("need the listing")),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy"))
    created = run_created(planner="scripted", budgets=Budgets(max_replans=1))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.REPLAN_LIMIT)
    assert final.detail == "need the listing: budget max_replans exhausted: 2 > 1"
    assert [event.round for event in sink.of(PlanningStarted)] == [1, 2]
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_replan_round_that_only_reuses_stops_with_no_new_evidence() -> None:
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"))),
        Decide(Replan("look again")),
        Propose(plan(snapshot_node("again"))),
        Decide(Replan("look once more")),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", budgets=Budgets(max_stale_replans=0))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.NO_NEW_EVIDENCE)
    assert final.detail == "look once more: budget max_stale_replans exhausted: 1 > 0"
    assert final.nodes["r2.again"].status is NodeStatus.REUSED
    assert executor.called == ["case"]
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_replan_round_with_a_new_output_may_be_followed_by_another_replan() -> None:
    # The control for the test above: with max_stale_replans=0 a round of fresh evidence goes on.
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"))),
        Decide(Replan("need the policy")),
        Propose(plan(policy_node("policy"))),
        Decide(Replan("need the listing")),
        Propose(plan(listing_node("docs"))),
        Decide(verified(CASE_REF, POLICY_REF)),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy", "docs"))
    created = run_created(planner="scripted", budgets=Budgets(max_stale_replans=0, max_replans=2))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.round) == (RunStatus.COMPLETED, 3)
    assert executor.called == ["case", "r2.policy", "r3.docs"]
    planner.assert_done()
    executor.assert_done()


async def test_a_replan_that_would_exceed_max_nodes_stops_with_node_budget_exhausted() -> None:
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"), policy_node("policy"))),
        Decide(Replan("need the listing")),
        Propose(plan(listing_node("docs"))),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy"))
    created = run_created(planner="scripted", budgets=Budgets(max_nodes=2))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.NODE_BUDGET_EXHAUSTED)
    assert final.detail == "replan 2: budget max_nodes exhausted: 3 > 2"
    assert len(sink.of(PlanAccepted)) == 1
    planner.assert_done()
    executor.assert_done()


# ---------------------------------------------------------------- the repeat limit


async def test_the_same_action_proposed_again_in_a_replan_beyond_repeat_limit_stops_the_run() -> None:
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"))),
        Decide(Replan("look again")),
        Propose(plan(snapshot_node("case"))),
        Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "the planner gives up")),  # the join still asks
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", budgets=Budgets(repeat_limit=1))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.REPEATED_ACTION_FINGERPRINT)
    assert final.detail is not None
    assert final.detail.startswith("r2.case: ")
    assert "proposed 2 times (limit 1)" in final.detail
    assert final.nodes["r2.case"].status is NodeStatus.CANCELLED  # neither executed nor reused
    assert sink.of(NodeReused) == []
    assert executor.called == ["case"]
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_an_action_proposed_more_than_repeat_limit_times_stops_with_repeated_action_fingerprint() -> (
    None
):
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("n0"), snapshot_node("n1"), snapshot_node("n2"))),
        Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "the planner gives up")),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", budgets=Budgets(repeat_limit=2))

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.REPEATED_ACTION_FINGERPRINT)
    assert final.detail is not None
    assert final.detail.startswith("n2: ")
    assert "proposed 3 times (limit 2)" in final.detail
    assert executor.called == ["n0"]
    assert final.nodes["n2"].status is NodeStatus.CANCELLED  # the third proposal is neither run nor reused
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- verified answers


async def test_a_final_answer_citing_what_no_tool_output_contains_needs_a_human() -> None:
    answer = Final({"outcome": "DOCUMENTS_COMPLETE"}, citations=[CASE_REF, "evidence://C-102/DOC-C102-999@1"])
    planner = ScriptedPlanner(Propose(plan(snapshot_node("case"))), Decide(answer))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.FINAL_ANSWER_UNSUPPORTED)
    assert final.detail is not None
    assert "evidence://C-102/DOC-C102-999@1" in final.detail
    assert CASE_REF not in final.detail
    assert final.result == {"outcome": "DOCUMENTS_COMPLETE"}  # kept for the human who checks it
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_citation_found_only_in_the_arguments_of_a_node_is_unsupported() -> None:
    # The planner wrote "C-201" into a node itself; a denied node has no output to support it.
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"), snapshot_node("other", case_id="C-201"))),
        Decide(verified(CASE_REF, "C-201")),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.FINAL_ANSWER_UNSUPPORTED)
    planner.assert_done()
    executor.assert_done()


# ---------------------------------------------------------------- observed document ids


async def test_a_document_id_the_run_never_observed_is_denied_and_never_resolved() -> None:
    # "listed" waits for the listing, which names DOC-C102-003; "guess" names a document nothing listed.
    planner = ScriptedPlanner(
        Propose(
            plan(
                listing_node("docs"),
                resolve_node("guess", "DOC-C102-999"),
                {**resolve_node("listed", "DOC-C102-003"), "after": ["docs"]},
            )
        ),
        Decide(verified()),
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("docs", "resolve[0]"))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    [denied] = sink.of(NodeDenied)
    assert (denied.node_id, denied.decision.rule_id) == ("guess", "resource.not_observed")
    assert denied.args == {"case_id": CASE_ID, "document_id": "DOC-C102-999"}
    assert sorted(executor.called) == ["docs", "listed"]
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- what the planner is shown


async def test_the_planner_is_shown_only_the_tools_the_run_may_use() -> None:
    # tenant catalogue drops the resolver, the scopes drop the policy; a resting tool stays on the list
    # (its calls wait for it: its health changes nothing about what the run may do).
    health = ToolHealth(threshold=1, first_cooloff_s=600.0)
    health.record(
        (TENANT, DOCUMENTS_TOOL),
        NodeError(kind=ErrorKind.TRANSIENT, code="HTTP_503", message="x"),
        time.monotonic(),
    )
    planner = ScriptedPlanner(Propose(plan(snapshot_node("case"))), Decide(verified(CASE_REF)))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(
        planner="scripted",
        scopes=(SCOPE_CASES, SCOPE_DOCUMENTS),
        tenant_tools=(CASE_TOOL, POLICY_TOOL, DOCUMENTS_TOOL),
    )

    final = await drive(driver(sink, executor, planner, health=health), created)

    assert [[tool.name for tool in context.tools] for context in planner.contexts] == [
        [CASE_TOOL, DOCUMENTS_TOOL],
        [CASE_TOOL, DOCUMENTS_TOOL],
    ]
    assert final.status is RunStatus.COMPLETED
    planner.assert_done()
    executor.assert_done()


async def test_a_planner_in_a_stage_no_tool_serves_is_shown_no_tools_and_its_nodes_are_denied() -> None:
    planner = ScriptedPlanner(
        Propose(plan(snapshot_node("case"))),
        Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "nothing could run")),
    )
    sink, executor = RecordingSink(), ScriptedExecutor({})
    created = run_created(planner="scripted", scopes=ALL_SCOPES, stage="settle")

    final = await drive(driver(sink, executor, planner), created)

    assert planner.proposing[0].tools == []
    [denied] = sink.of(NodeDenied)
    assert denied.decision.rule_id == "stage.not_allowed"
    assert sink.of(NodeDispatched) == []
    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.INSUFFICIENT_EVIDENCE)
    planner.assert_done()
    executor.assert_done()

"""RunDriver without Ray, a database or a network: a recording sink, a strict scripted executor and planners."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from dag.budget import Budgets
from dag.contracts import INVESTIGATE, BindingMatch, Risk, RunBinding, ToolContract, catalogue_of
from dag.events import (
    ErrorKind,
    JoinStarted,
    NodeDenied,
    NodeDispatched,
    NodeExpanded,
    NodeReused,
    NodeSucceeded,
    PlanAccepted,
    PlanningStarted,
    RunEvent,
    RunFinished,
)
from dag.run_state import RunState, fold
from dag.schemas import JsonSchema
from dag.states import NodeStatus, RunStatus, StopReason
from dag.storable import MAX_DEPTH
from mcp_server.contracts import CASEOPS_CHECKS, SCOPE_CASES, SCOPE_POLICIES
from mcp_server.planner import (
    CASE_TOOL,
    CHECK_TOOLS,
    DOCUMENTS_TOOL,
    POLICY_TOOL,
    RESOLVE_TOOL,
    decide_document_check,
    document_check_plan,
)
from planner import Final, Replan
from tests.c102 import C102_RESULT, CASE_OUTPUT, RESOLVE_OUTPUT, document
from tests.run_fakes import (
    CASE_ARGS,
    CASE_ID,
    MCP_URL,
    RESOLVE_ARGS,
    RUN_ID,
    SUBJECT,
    TENANT,
    TOKENS,
    WAIT_S,
    Decide,
    Propose,
    RecordingSink,
    Scripted,
    ScriptedExecutor,
    ScriptedPlanner,
    SinkDown,
    assert_log_rebuilds,
    c102_script,
    call_key,
    drive,
    driver,
    failure,
    node_status,
    ok,
    only,
    run_created,
    snapshot_node,
)

# ---------------------------------------------------------------- the C-102 document check


async def test_c102_outputs_complete_the_run_with_the_normalized_document_result() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created()

    final = await drive(driver(sink, executor), created)

    assert final.status is RunStatus.COMPLETED
    assert final.stop_reason is None
    assert final.result == C102_RESULT
    assert node_status(final) == {
        "case": NodeStatus.SUCCEEDED,
        "policy": NodeStatus.SUCCEEDED,
        "docs": NodeStatus.SUCCEEDED,
        "resolve": NodeStatus.SUCCEEDED,
        "resolve[0]": NodeStatus.SUCCEEDED,
    }
    assert final.nodes["resolve[0]"].args == RESOLVE_ARGS
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_the_joiner_sees_every_tool_node_in_run_order_and_no_group() -> None:
    planner = ScriptedPlanner(Propose(document_check_plan(CASE_ID)), Decide(decide_document_check))
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    planner.assert_done()
    [observations] = planner.observations
    assert [(o.node_id, o.tool, o.status) for o in observations] == [
        ("case", CASE_TOOL, NodeStatus.SUCCEEDED),
        ("policy", POLICY_TOOL, NodeStatus.SUCCEEDED),
        ("docs", DOCUMENTS_TOOL, NodeStatus.SUCCEEDED),
        ("resolve[0]", RESOLVE_TOOL, NodeStatus.SUCCEEDED),
    ]
    assert observations[3].args == RESOLVE_ARGS
    assert observations[3].output == RESOLVE_OUTPUT
    assert final.result == C102_RESULT
    executor.assert_done()


async def test_the_planner_sees_the_case_goal_and_catalogue_but_nothing_of_the_principal() -> None:
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case")]}), Decide(Final({"ok": True}, citations=[]))
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted")

    await drive(driver(sink, executor, planner), created)

    planner.assert_done()
    context = planner.contexts[0]
    assert context.resource == {"case_id": CASE_ID}
    assert context.goal == created.goal
    # A run of the default stage is shown the checks, never the writes of the stage that acts.
    investigated = sorted(name for name, contract in CASEOPS_CHECKS.items() if INVESTIGATE in contract.stages)
    # the checks, and the evidence export (a long read the conformance planner does not use)
    assert sorted(tool.name for tool in context.tools) == sorted([*investigated, "caseops_export_evidence"])
    assert investigated == sorted(CHECK_TOOLS)
    assert not any(hasattr(context, name) for name in ("tenant_id", "subject", "scopes", "principal"))


async def test_resolve_children_are_dispatched_while_the_case_snapshot_is_still_running() -> None:
    case_gate, resolve_gate = asyncio.Event(), asyncio.Event()
    sink = RecordingSink()
    executor = ScriptedExecutor(c102_script({"case": case_gate, "resolve[0]": resolve_gate}))
    created = run_created()
    running = asyncio.create_task(drive(driver(sink, executor), created))

    async with asyncio.timeout(WAIT_S):
        await executor.invoked["resolve[0]"].wait()
    state = sink.state
    assert state.nodes["case"].status is NodeStatus.RUNNING
    assert state.nodes["docs"].status is NodeStatus.SUCCEEDED
    assert state.nodes["resolve[0]"].status is NodeStatus.RUNNING
    assert not any(isinstance(e, NodeSucceeded) and e.node_id == "case" for e in sink.events)

    case_gate.set()
    resolve_gate.set()
    final = await running
    assert final.status is RunStatus.COMPLETED
    assert final.result == C102_RESULT
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_every_dispatch_is_recorded_before_the_executor_is_invoked_for_it() -> None:
    journal: list[tuple[str, str]] = []
    sink, executor = RecordingSink(journal), ScriptedExecutor(c102_script(), journal)
    created = run_created()

    final = await drive(driver(sink, executor), created)

    invocations = [node for what, node in journal if what == "run"]
    assert sorted(invocations) == ["case", "docs", "policy", "resolve[0]"]
    for node in invocations:
        assert journal.index(("recorded node_dispatched", node)) < journal.index(("run", node)), node
    for _, events, state in sink.appends:  # the state handed to the sink already holds the dispatch
        for event in events:
            if isinstance(event, NodeDispatched):
                assert state.nodes[event.node_id].status is not NodeStatus.PENDING
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()


async def test_each_call_carries_a_task_token_for_this_run_node_and_principal() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created()

    await drive(driver(sink, executor), created)

    executor.assert_done()
    assert sorted(executor.called) == ["case", "docs", "policy", "resolve[0]"]
    jtis = set()
    for call in executor.calls:
        claims = TOKENS.verify(call.token)
        assert claims.tenant_id == TENANT
        assert claims.sub == SUBJECT
        assert claims.resource == {"case_id": CASE_ID}
        assert claims.tool == call.tool
        assert claims.scopes == frozenset({CASEOPS_CHECKS[call.tool].scope})  # only what this call needs
        assert claims.task_id == f"{RUN_ID}/{call.node_id}/1"
        assert claims.aud == MCP_URL
        jtis.add(claims.jti)
        assert (call.run_id, call.attempt, call.mcp_url) == (RUN_ID, 1, MCP_URL)
        assert call.timeout_s == CASEOPS_CHECKS[call.tool].timeout_s
    assert len(jtis) == 4


# ---------------------------------------------------------------- policy


async def test_a_proposed_node_aimed_at_another_case_is_denied_and_never_executed() -> None:
    proposal = {"nodes": [snapshot_node("case"), snapshot_node("other", case_id="C-201")]}
    planner = ScriptedPlanner(
        Decide(Final({"checked": True}, citations=[]))
    )  # a client proposal: propose() is not asked
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(driver(sink, executor, planner), created)

    [denied] = sink.of(NodeDenied)
    assert denied.node_id == "other"
    assert denied.args == {"case_id": "C-201"}
    assert denied.decision.allowed is False
    assert denied.decision.rule_id == "resource.case_bound"
    assert executor.called == ["case"]
    assert [event.node_id for event in sink.of(NodeDispatched)] == ["case"]
    assert final.status is RunStatus.COMPLETED
    assert final.nodes["other"].status is NodeStatus.DENIED
    planner.assert_done()
    assert [(o.node_id, o.status) for o in planner.observations[0]] == [
        ("case", NodeStatus.SUCCEEDED),
        ("other", NodeStatus.DENIED),
    ]
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_case_id_taken_from_an_upstream_output_is_authorized_on_its_resolved_value() -> None:
    other_case = {**CASE_OUTPUT, "case_id": "C-201"}
    proposal = {
        "nodes": [
            snapshot_node("case"),
            {
                "id": "follow",
                "tool": POLICY_TOOL,
                "args": {"case_id": {"$ref": "case", "pointer": "/case_id"}},
            },
        ]
    }
    planner = ScriptedPlanner(Decide(Final({}, citations=[])))
    sink = RecordingSink()
    executor = ScriptedExecutor({call_key(CASE_TOOL, CASE_ARGS): Scripted(ok(other_case))})
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(driver(sink, executor, planner), created)

    [denied] = sink.of(NodeDenied)
    assert (denied.node_id, denied.args, denied.decision.rule_id) == (
        "follow",
        {"case_id": "C-201"},
        "resource.case_bound",
    )
    assert executor.called == ["case"]
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_without_documents_read_the_listing_is_denied_and_its_dependent_skipped() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy"))
    created = run_created(scopes=(SCOPE_CASES, SCOPE_POLICIES))

    final = await drive(driver(sink, executor), created)

    [denied] = sink.of(NodeDenied)
    assert denied.node_id == "docs"
    assert denied.decision.rule_id == "scope.missing"
    assert final.nodes["docs"].status is NodeStatus.DENIED
    assert final.nodes["resolve"].status is NodeStatus.SKIPPED
    assert final.nodes["resolve"].skipped_because == "docs"
    assert sorted(executor.called) == ["case", "policy"]
    # C-102 misses a document and the listing is unknown: the conformance verdict cannot be given.
    assert final.status is RunStatus.NEEDS_HUMAN
    assert final.stop_reason is StopReason.INSUFFICIENT_EVIDENCE
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- the fingerprint gate


async def test_two_identical_nodes_execute_once_and_the_second_is_reused() -> None:
    proposal = {"nodes": [snapshot_node("first"), snapshot_node("second")]}
    planner = ScriptedPlanner(Decide(Final({}, citations=[])))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(driver(sink, executor, planner), created)

    assert executor.called == ["first"]
    [reused] = sink.of(NodeReused)
    assert (reused.node_id, reused.source_node_id) == ("second", "first")
    assert final.nodes["second"].status is NodeStatus.REUSED
    assert final.nodes["second"].reused_from == "first"
    assert final.nodes["second"].output == CASE_OUTPUT
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_node_identical_to_a_failed_one_fails_without_running_again() -> None:
    proposal = {"nodes": [snapshot_node("first"), snapshot_node("second")]}
    planner = ScriptedPlanner(Decide(Final({}, citations=[])))
    lost = failure(ErrorKind.BUSINESS, "CASE_ARCHIVED", "the case is archived")
    sink = RecordingSink()
    executor = ScriptedExecutor({call_key(CASE_TOOL, CASE_ARGS): Scripted(lost)})
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(driver(sink, executor, planner), created)

    assert executor.called == ["first"]
    assert final.nodes["first"].error == lost.error
    second = final.nodes["second"]
    assert second.status is NodeStatus.FAILED
    assert second.error is not None
    assert second.error.code == "IDENTICAL_ACTION_FAILED"
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- planning failures


@pytest.mark.parametrize(
    ("proposal", "code"),
    [
        ({"nodes": []}, "EMPTY_PLAN"),
        ({"nodes": "case"}, "MALFORMED_PLAN"),
        ({"nodes": [{"id": "x", "tool": "caseops_close_case", "args": CASE_ARGS}]}, "UNKNOWN_TOOL"),
        ({"nodes": [snapshot_node("case"), snapshot_node("case")]}, "DUPLICATE_NODE_ID"),
        (
            {
                "nodes": [
                    {
                        "id": "case",
                        "tool": CASE_TOOL,
                        "args": {"case_id": CASE_ID, "tenant_id": "tenant-other"},
                    }
                ]
            },
            "FORBIDDEN_ARGUMENT",
        ),
        (
            {"nodes": [{"id": "case", "tool": CASE_TOOL, "args": {"case_id": CASE_ID, "priority": "high"}}]},
            "INVALID_ARGUMENTS",
        ),
        (
            {"nodes": [snapshot_node("case", after=["policy"]), snapshot_node("policy")]},
            "FORWARD_REFERENCE",
        ),
    ],
    ids=[
        "empty",
        "malformed",
        "unknown-tool",
        "duplicate-id",
        "identity-argument",
        "extra-argument",
        "forward-reference",
    ],
)
async def test_a_proposal_that_fails_validation_fails_the_run_with_its_error_code(
    proposal: dict[str, Any], code: str
) -> None:
    planner = ScriptedPlanner(Propose(proposal))
    sink, executor = RecordingSink(), ScriptedExecutor({})
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    assert final.status is RunStatus.FAILED
    assert final.stop_reason is StopReason.PLAN_INVALID
    assert final.detail is not None
    assert json.loads(final.detail)["code"] == code
    assert sink.of(PlanAccepted) == []
    assert final.nodes == {}
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_an_invalid_client_proposal_fails_the_run_without_asking_the_planner() -> None:
    planner = ScriptedPlanner()
    sink, executor = RecordingSink(), ScriptedExecutor({})
    created = run_created(planner="scripted", proposal={"nodes": [snapshot_node("Bad Id")]})

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.FAILED, StopReason.PLAN_INVALID)
    assert final.detail is not None
    assert json.loads(final.detail)["code"] == "INVALID_NODE_ID"
    planner.assert_done()
    executor.assert_done()


async def test_a_planner_that_raises_fails_the_run_with_planner_error() -> None:
    planner = ScriptedPlanner(Propose(RuntimeError("the model is unavailable")))
    sink, executor = RecordingSink(), ScriptedExecutor({})
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner), created)

    assert final.status is RunStatus.FAILED
    assert final.stop_reason is StopReason.PLANNER_ERROR
    assert final.detail == "the planner failed: RuntimeError"
    assert "the model is unavailable" not in final.detail
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_replan_request_beyond_max_replans_stops_the_run_with_replan_limit() -> None:
    planner = ScriptedPlanner(Propose({"nodes": [snapshot_node("case")]}), Decide(Replan("need the policy")))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", budgets=Budgets(max_replans=0))

    final = await drive(driver(sink, executor, planner), created)

    assert final.status is RunStatus.STOPPED
    assert final.stop_reason is StopReason.REPLAN_LIMIT
    assert final.detail == "need the policy: budget max_replans exhausted: 1 > 0"
    assert final.result is None
    assert len(sink.of(JoinStarted)) == 1
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- budgets


def three_documents_script(gates: Mapping[str, asyncio.Event] | None = None) -> dict[Any, Scripted]:
    script = only("case", "policy", gates=gates)
    many = {"case_id": CASE_ID, "documents": [document(f"DOC-C102-00{i}") for i in (3, 4, 5)]}
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(ok(many), (gates or {}).get("docs"))
    return script


async def test_a_fanout_beyond_the_budget_stops_the_run_and_cancels_nothing_when_nothing_runs() -> None:
    docs_gate = asyncio.Event()
    sink, executor = RecordingSink(), ScriptedExecutor(three_documents_script({"docs": docs_gate}))
    created = run_created(budgets=Budgets(max_fanout=2))
    running = asyncio.create_task(drive(driver(sink, executor), created))
    await sink.reached(lambda s: all(n in s.nodes and s.nodes[n].status.terminal for n in ("case", "policy")))
    docs_gate.set()

    final = await running

    assert final.status is RunStatus.STOPPED
    assert final.stop_reason is StopReason.FANOUT_LIMIT
    assert final.detail == "resolve: budget max_fanout exhausted: 3 > 2"
    assert sink.of(NodeExpanded) == []
    assert executor.cancelled == []
    assert sorted(executor.called) == ["case", "docs", "policy"]
    assert node_status(final) == {
        "case": NodeStatus.SUCCEEDED,
        "policy": NodeStatus.SUCCEEDED,
        "docs": NodeStatus.SUCCEEDED,
        "resolve": NodeStatus.CANCELLED,  # never dispatched; closed by run_finished
    }
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_fanout_beyond_the_budget_cancels_exactly_the_calls_in_flight() -> None:
    gates = {"case": asyncio.Event(), "policy": asyncio.Event()}  # never opened: still running at the stop
    sink, executor = RecordingSink(), ScriptedExecutor(three_documents_script(gates))
    created = run_created(budgets=Budgets(max_fanout=2))

    final = await drive(driver(sink, executor), created)
    async with asyncio.timeout(WAIT_S):
        await executor.settled["case"].wait()
        await executor.settled["policy"].wait()

    assert final.stop_reason is StopReason.FANOUT_LIMIT
    assert sorted(executor.cancelled) == ["case", "policy"]
    assert node_status(final) == {
        "case": NodeStatus.CANCELLED,
        "policy": NodeStatus.CANCELLED,
        "docs": NodeStatus.SUCCEEDED,
        "resolve": NodeStatus.CANCELLED,
    }
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_fanout_equal_to_the_budget_runs() -> None:
    script = three_documents_script()
    for document_id in ("DOC-C102-003", "DOC-C102-004", "DOC-C102-005"):
        args = {"case_id": CASE_ID, "document_id": document_id}
        output = {
            **RESOLVE_OUTPUT,
            "document_id": document_id,
            "source_ref": f"evidence://C-102/{document_id}@1",
        }
        script[call_key(RESOLVE_TOOL, args)] = Scripted(ok(output))
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(budgets=Budgets(max_fanout=3))

    final = await drive(driver(sink, executor), created)

    assert final.status is RunStatus.COMPLETED
    assert [(e.node_id, e.count) for e in sink.of(NodeExpanded)] == [("resolve", 3)]
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_the_node_budget_counts_the_children_a_fanout_would_add() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(three_documents_script())
    created = run_created(budgets=Budgets(max_nodes=6))  # 4 plan nodes, the for_each too, + 3 children = 7

    final = await drive(driver(sink, executor), created)

    assert final.status is RunStatus.STOPPED
    assert final.stop_reason is StopReason.NODE_BUDGET_EXHAUSTED
    assert final.detail == "resolve: budget max_nodes exhausted: 7 > 6"
    assert sink.of(NodeExpanded) == []
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_an_empty_fanout_settles_its_group_and_the_run_completes() -> None:
    complete_case = {
        **CASE_OUTPUT,
        "received_document_codes": ["ACCIDENT_CERTIFICATE", "IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
    }
    script = only("policy")
    script[call_key(CASE_TOOL, CASE_ARGS)] = Scripted(ok(complete_case))
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(ok({"case_id": CASE_ID, "documents": []}))
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created()

    final = await drive(driver(sink, executor), created)

    assert [(e.node_id, e.count) for e in sink.of(NodeExpanded)] == [("resolve", 0)]
    assert final.nodes["resolve"].status is NodeStatus.SUCCEEDED
    assert final.status is RunStatus.COMPLETED
    assert final.result is not None
    assert final.result["outcome"] == "DOCUMENTS_COMPLETE"
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_document_listed_twice_is_resolved_once_and_the_second_child_reuses_it() -> None:
    script = only("case", "policy", "resolve[0]")
    twice = {"case_id": CASE_ID, "documents": [document("DOC-C102-003"), document("DOC-C102-003")]}
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(ok(twice))
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created()

    final = await drive(driver(sink, executor), created)

    assert sorted(executor.called) == ["case", "docs", "policy", "resolve[0]"]
    assert final.nodes["resolve[1]"].status is NodeStatus.REUSED
    assert final.nodes["resolve[1]"].reused_from == "resolve[0]"
    assert final.status is RunStatus.COMPLETED
    assert final.result == C102_RESULT
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- tool failures


async def test_a_failed_tool_fails_its_node_skips_its_dependents_and_the_run_still_joins() -> None:
    broken = failure(ErrorKind.PROTOCOL, "INVALID_OUTPUT", "the output does not fit the contract")
    script = only("case", "policy")
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(broken)
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created()

    final = await drive(driver(sink, executor), created)

    docs = final.nodes["docs"]
    assert docs.status is NodeStatus.FAILED
    assert docs.error == broken.error
    assert (docs.started_at, docs.finished_at) == (broken.started_at, broken.finished_at)
    assert final.nodes["resolve"].status is NodeStatus.SKIPPED
    assert final.nodes["resolve"].skipped_because == "docs"
    assert len(sink.of(JoinStarted)) == 1
    # A call without an answer is not evidence: no verdict rests on it, and the stop names it.
    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.EVIDENCE_INCOMPLETE)
    assert final.detail is not None
    assert f"docs ({DOCUMENTS_TOOL}: INVALID_OUTPUT)" in final.detail
    assert final.result is None
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_tool_that_answers_no_gives_the_planner_its_verdict() -> None:
    refused = failure(ErrorKind.BUSINESS, "CASE_ARCHIVED", "the case is archived")
    script = only("case", "policy")
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(refused)
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created()

    final = await drive(driver(sink, executor), created)

    assert final.nodes["docs"].status is NodeStatus.FAILED
    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.INSUFFICIENT_EVIDENCE)
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- the event sink


async def test_a_sink_that_always_fails_makes_drive_raise_before_anything_runs() -> None:
    # drive() cannot record a terminal state without a sink, so its own attempt to record the failure
    # raises too and the error reaches the caller; nothing is planned or executed.
    planner = ScriptedPlanner()
    sink = RecordingSink(fail_on=lambda events: True, failures=1_000)
    executor = ScriptedExecutor({})
    created = run_created(planner="scripted")

    with pytest.raises(SinkDown):
        await drive(driver(sink, executor, planner), created)

    assert sink.appends == []
    assert [events[0].kind for events in sink.refused] == ["planning_started", "run_finished"]
    refused_finish = sink.refused[1][0]
    assert isinstance(refused_finish, RunFinished)
    assert refused_finish.stop_reason is StopReason.INTERNAL_ERROR
    planner.assert_done()
    executor.assert_done()


async def test_a_sink_failing_to_record_dispatches_fails_the_run_and_nothing_is_executed() -> None:
    def has_dispatch(events: Sequence[RunEvent]) -> bool:
        return any(isinstance(event, NodeDispatched) for event in events)

    sink = RecordingSink(fail_on=has_dispatch, failures=1)
    executor = ScriptedExecutor({})
    created = run_created()

    final = await drive(driver(sink, executor), created)

    assert final.status is RunStatus.FAILED
    assert final.stop_reason is StopReason.INTERNAL_ERROR
    assert executor.calls == []  # an unrecorded dispatch must never run
    assert sink.of(NodeDispatched) == []
    assert sink.of(PlanAccepted) == []  # stored with the first dispatches, it went down with them
    assert final.nodes == {}
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- the log is the run


async def test_the_recorded_log_has_contiguous_seqs_and_folds_into_the_final_state() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created()

    final = await drive(driver(sink, executor), created)

    seq = 2
    for first_seq, events, _ in sink.appends:
        assert first_seq == seq
        seq += len(events)
    assert final.status.terminal
    assert fold([created, *sink.events]) == final
    assert sink.state == final
    kinds = [event.kind for event in sink.events]
    assert kinds[:2] == ["planning_started", "plan_accepted"]
    assert kinds[-2:] == ["join_started", "run_finished"]
    executor.assert_done()


def _nested_past_max_depth() -> list[object]:
    value: list[object] = []
    for _ in range(MAX_DEPTH - 1):  # inside the result's own object, one level more than a run records
        value = [value]
    return value


@pytest.mark.parametrize(
    "decision",
    [
        Final({"answer": "complete\x00"}, citations=[]),
        Final({"score": float("nan")}, citations=[]),
        Replan("look again \ud800"),
        Final({"answer": _nested_past_max_depth()}, citations=[]),
    ],
    ids=["nul-in-the-result", "nan-in-the-result", "surrogate-in-the-reason", "nested-too-deep"],
)
async def test_an_answer_no_run_can_record_is_the_planner_breaking_its_contract(decision: object) -> None:
    planner = ScriptedPlanner(Decide(decision))  # type: ignore[arg-type]
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", proposal={"nodes": [snapshot_node("case")]})

    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.PLANNER_CONTRACT_VIOLATION)
    assert final.detail is not None
    assert "cannot be recorded" in final.detail
    assert final.result is None
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


def _appended_kinds(sink: RecordingSink) -> list[list[str]]:
    return [[event.kind for event in events] for _, events, _ in sink.appends]


async def test_an_accepted_plan_is_stored_with_its_first_dispatches_and_the_last_outcome_with_the_join() -> (
    None
):
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())

    final = await drive(driver(sink, executor), run_created())

    appends = _appended_kinds(sink)
    assert appends[0] == ["planning_started"]  # the planner is asked once this is stored
    assert appends[1][0] == "plan_accepted"
    assert appends[1].count("node_dispatched") == 3  # case, policy, docs: the plan is acted on through them
    assert appends[-2] == [
        "node_succeeded",
        "group_settled",
        "join_started",
    ]  # the last outcome, the round's end
    assert appends[-1] == ["run_finished"]
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()


async def test_outcomes_that_start_nothing_while_calls_are_out_are_stored_with_the_next_dispatch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """case and policy land while docs is out and start nothing: one append each would only queue docs's
    outcome behind them. They wait for the append that acts next: docs's outcome with the resolves it starts."""
    monkeypatch.setattr("actors.run.round.HELD_AT_MOST_S", 60.0)  # this test is not about the bound
    docs = asyncio.Event()
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script(gates={"docs": docs}))
    run = asyncio.create_task(drive(driver(sink, executor), run_created()))
    await asyncio.wait_for(
        asyncio.gather(executor.settled["case"].wait(), executor.settled["policy"].wait()), 5
    )
    for _ in range(10):  # let the run's loop take the two outcomes in
        await asyncio.sleep(0)
    docs.set()

    final = await run

    appends = _appended_kinds(sink)
    landed = next(kinds for kinds in appends if "node_succeeded" in kinds)
    assert landed == ["node_succeeded"] * 3 + [
        "node_expanded",
        "node_dispatched",
    ]  # and the resolve docs starts
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()


async def test_outcomes_that_start_nothing_are_stored_within_the_hold_while_a_call_is_still_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("actors.run.round.HELD_AT_MOST_S", 0.01)
    docs = asyncio.Event()
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script(gates={"docs": docs}))
    run = asyncio.create_task(drive(driver(sink, executor), run_created()))

    def case_and_policy_stored(state: RunState) -> bool:
        return all(
            node in state.nodes and state.nodes[node].status is NodeStatus.SUCCEEDED
            for node in ("case", "policy")
        )

    stored = await sink.reached(case_and_policy_stored)

    assert stored.nodes["docs"].status is NodeStatus.RUNNING  # stored by the bound, not by docs's landing
    docs.set()
    assert (await run).status is RunStatus.COMPLETED
    executor.assert_done()


async def test_a_run_with_a_plan_of_its_own_stores_planning_acceptance_and_dispatches_in_one_append() -> None:
    proposal = {"nodes": [snapshot_node("case")]}
    planner = ScriptedPlanner(Decide(Final({"checked": True}, citations=[])))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(driver(sink, executor, planner), created)

    assert _appended_kinds(sink) == [
        ["planning_started", "plan_accepted", "node_dispatched"],
        ["node_succeeded", "join_started"],
        ["run_finished"],
    ]
    assert final.status is RunStatus.COMPLETED
    assert_log_rebuilds(sink, created, final)


async def test_a_failed_append_takes_the_staged_events_with_it_and_the_state_is_what_is_stored() -> None:
    from actors.run.recorder import RunRecorder

    def always(events: Sequence[RunEvent]) -> bool:
        return True

    sink = RecordingSink(fail_on=always, failures=1)
    created = run_created(proposal={"nodes": [snapshot_node("case")]})
    run = RunRecorder(fold([created]), 1, sink)
    await run.stage(PlanningStarted(at=created.at, round=1))
    assert run.state.status is RunStatus.PLANNING  # applied at once, stored later

    with pytest.raises(SinkDown):
        await run.record(PlanAccepted(at=created.at, round=1, plan=created.proposal or {}))
    assert run.state == fold([created])
    assert run.last_seq == 1

    await run.flush()  # nothing left staged: nothing is written
    await run.record(PlanningStarted(at=created.at, round=1))
    assert _appended_kinds(sink) == [["planning_started"]]
    assert sink.state == run.state


async def test_a_planner_is_not_shown_a_tool_whose_resource_key_the_run_lacks() -> None:
    class PathInput(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

        path: str

    read_file = dataclasses.replace(
        CASEOPS_CHECKS["caseops_get_case_snapshot"],
        name="read_file",
        input_model=PathInput,
        run_bound=frozenset({"path"}),
        resource_keys=(RunBinding("path", "root", BindingMatch.PATH_WITHIN),),
    )
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case")]}), Decide(Final({"ok": True}, citations=[]))
    )
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    catalogue = catalogue_of(*CASEOPS_CHECKS.values(), read_file)

    await drive(driver(sink, executor, planner, catalogue=catalogue), run_created(planner="scripted"))

    planner.assert_done()
    assert sorted(tool.name for tool in planner.contexts[0].tools) == sorted(CASEOPS_CHECKS)


READ_REPORT = ToolContract(
    name="read_text_file",
    version="1",
    description="Read a text file.",
    scope="files:read",
    risk=Risk.READ_ONLY,
    declared_input=JsonSchema.of(
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    ),
    run_bound=frozenset({"path"}),
    resource_keys=(RunBinding("path", "root", BindingMatch.PATH_WITHIN),),
    stages=frozenset({"investigate"}),
    server="files",
)
"""A tool of a file-system toolset: nothing of caseops, its output a file's text."""


@pytest.mark.parametrize(
    ("citations", "status"),
    [
        pytest.param(["Q1 revenue: 42"], RunStatus.COMPLETED, id="cited-from-the-output"),
        pytest.param(["/srv/reports/q1.txt"], RunStatus.NEEDS_HUMAN, id="cited-from-the-arguments-only"),
        pytest.param(["Q2 revenue: 41"], RunStatus.NEEDS_HUMAN, id="made-up"),
    ],
)
async def test_a_final_answer_over_any_toolset_may_cite_only_what_its_tool_outputs_contain(
    citations: list[str], status: RunStatus
) -> None:
    args = {"path": "/srv/reports/q1.txt"}
    planner = ScriptedPlanner(
        Propose({"nodes": [{"id": "read", "tool": READ_REPORT.name, "args": args}]}),
        Decide(Final({"revenue": 42}, citations=citations)),
    )
    executor = ScriptedExecutor(
        {call_key(READ_REPORT.name, args): Scripted(ok({"content": "Q1 revenue: 42"}))}
    )
    created = run_created(planner="scripted", scopes=["files:read"], resource={"root": "/srv/reports"})

    state = await drive(
        driver(RecordingSink(), executor, planner, catalogue=catalogue_of(READ_REPORT)), created
    )

    planner.assert_done()
    executor.assert_done()
    assert state.status is status
    if status is RunStatus.NEEDS_HUMAN:
        assert state.stop_reason is StopReason.FINAL_ANSWER_UNSUPPORTED
        assert citations[0] in (state.detail or "")

"""RunDriver with withdrawn tools: a plan naming a tool whose server was never listed, a tool whose definition
changed under the run, and a tool withdrawn between a call's failure and its retry each stop the run with
the withdrawal's reason, recorded (``dag.admission`` and ``dag.dispatch`` decide; the driver records)."""

from __future__ import annotations

import random
from typing import Any

from actors.calls.call import ToolCall, ToolOutcome
from actors.run.deps import RunDeps, ToolEndpoint
from actors.run.driver import RunDriver
from actors.run.planning import planning_context
from actors.toolsets.withdrawal import Withdrawal
from dag.events import ErrorKind, NodeDenied, NodeDispatched, NodeFailed
from dag.evidence import DEFINITION_CHANGED_RULE, SERVER_UNREACHABLE_RULE
from dag.run_state import apply
from dag.states import NodeStatus, RunStatus, StopReason
from mcp_server.contracts import CASEOPS_CHECKS
from mcp_server.planner import CASE_TOOL, ConformancePlanner
from planner import Final
from tests.run_fakes import (
    CASE_ARGS,
    FAST_RETRY,
    MCP_URL,
    TOKENS,
    Decide,
    RecordingSink,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    drive,
    only,
    policy_node,
    run_created,
    snapshot_node,
    transient,
)

UNREACHABLE = Withdrawal(
    SERVER_UNREACHABLE_RULE, StopReason.TOOL_SERVER_UNREACHABLE, "server 'toy' is unreachable"
)
CHANGED = Withdrawal(DEFINITION_CHANGED_RULE, StopReason.TOOL_DEFINITION_CHANGED, "its definition changed")


def withdrawing_driver(
    sink: RecordingSink, executor: Any, planner: ScriptedPlanner, withdrawn: dict[str, Withdrawal]
) -> RunDriver:
    return RunDriver(withdrawing_deps(executor, planner, withdrawn), sink=sink)


def withdrawing_deps(executor: Any, planner: ScriptedPlanner, withdrawn: dict[str, Withdrawal]) -> RunDeps:
    return RunDeps(
        executor=executor,
        catalogue=CASEOPS_CHECKS,
        planners={"conformance": ConformancePlanner(), "scripted": planner},
        endpoint=ToolEndpoint(url=MCP_URL, tokens=TOKENS),
        retry=FAST_RETRY,
        rng=random.Random(7),
        withdrawn=withdrawn,
    )


async def test_a_plan_naming_a_tool_whose_server_was_never_listed_stops_the_run_with_its_withdrawal() -> None:
    planner = ScriptedPlanner()
    sink, executor = RecordingSink(), ScriptedExecutor({})
    proposal = {"nodes": [snapshot_node("case"), {"id": "echo", "tool": "echo", "args": {"text": "hi"}}]}
    created = run_created(planner="scripted", proposal=proposal)

    final = await drive(withdrawing_driver(sink, executor, planner, {"echo": UNREACHABLE}), created)

    assert (final.status, final.stop_reason, final.detail) == (
        RunStatus.STOPPED,
        StopReason.TOOL_SERVER_UNREACHABLE,
        "server 'toy' is unreachable",
    )
    assert final.plan is None  # nothing of the plan was accepted, nothing ran
    assert executor.calls == []
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_node_of_a_tool_withdrawn_under_the_run_is_denied_and_the_run_stops() -> None:
    planner = ScriptedPlanner(Decide(Final({}, citations=[])))
    sink, executor = RecordingSink(), ScriptedExecutor(only("policy"))
    created = run_created(
        planner="scripted", proposal={"nodes": [policy_node("policy"), snapshot_node("case")]}
    )

    final = await drive(withdrawing_driver(sink, executor, planner, {CASE_TOOL: CHANGED}), created)

    [denied] = sink.of(NodeDenied)
    assert (denied.node_id, denied.decision.rule_id) == ("case", DEFINITION_CHANGED_RULE)
    assert sink.of(NodeDispatched, "case") == []
    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.TOOL_DEFINITION_CHANGED)
    assert final.detail is not None
    assert final.detail.startswith("case: its definition changed")
    assert final.nodes["case"].status is NodeStatus.DENIED
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


class WithdrawingOnFailure:
    """Answers the snapshot call with a transient failure, and withdraws its tool as it does: the retry finds
    the tool withdrawn."""

    def __init__(self, withdrawn: dict[str, Withdrawal]) -> None:
        self._withdrawn = withdrawn
        self.calls: list[ToolCall] = []

    async def run(self, call: ToolCall) -> ToolOutcome:
        assert (call.tool, call.args) == (CASE_TOOL, CASE_ARGS), call
        self.calls.append(call)
        self._withdrawn[CASE_TOOL] = UNREACHABLE
        return transient()


async def test_a_retry_of_a_tool_withdrawn_since_its_failure_fails_the_node_and_stops_the_run() -> None:
    withdrawn: dict[str, Withdrawal] = {}
    planner = ScriptedPlanner(Decide(Final({}, citations=[])))
    sink, executor = RecordingSink(), WithdrawingOnFailure(withdrawn)
    created = run_created(planner="scripted", proposal={"nodes": [snapshot_node("case")]})

    final = await drive(withdrawing_driver(sink, executor, planner, withdrawn), created)

    assert [call.attempt for call in executor.calls] == [1]  # the retry was never sent
    [failed] = sink.of(NodeFailed, "case")
    assert (failed.error.kind, failed.error.code) == (ErrorKind.AUTHORIZATION, SERVER_UNREACHABLE_RULE)
    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.TOOL_SERVER_UNREACHABLE)
    assert final.detail is not None
    assert final.detail.startswith("case: server 'toy' is unreachable")
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


def test_a_model_planner_is_not_shown_a_tool_withdrawn_for_a_changed_definition() -> None:
    """What a planner may propose is what could run: a withdrawn tool is denied at dispatch, so offering it
    would only invite a plan that stops."""
    planner = ScriptedPlanner()
    deps = withdrawing_deps(ScriptedExecutor({}), planner, {CASE_TOOL: CHANGED})
    state = apply(None, run_created(planner="scripted"))

    offered = {tool.name for tool in planning_context(state, deps).tools}

    assert CASE_TOOL not in offered
    assert offered == set(CASEOPS_CHECKS) - {CASE_TOOL}

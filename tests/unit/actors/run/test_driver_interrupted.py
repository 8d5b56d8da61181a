"""A round a hard limit cut short ends the run ``stopped`` with the limit's reason, whatever the joiner decided.

Issue 26: a ``for_each`` refused by ``max_fanout`` or ``max_nodes`` ended ``completed`` under the outputs
planner, whose answer named only the nodes that ran. Over a toolset of two generic tools (``items``, ``echo``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dag.budget import Budgets
from dag.contracts import Risk, ToolContract, catalogue_of
from dag.events import ErrorKind, JoinStarted, NodeExpanded, RunCreated
from dag.schemas import JsonSchema
from dag.states import NodeStatus, RunStatus, StopReason
from planner import Final, JoinDecision, NeedsHuman, Replan
from planner.outputs import OutputsPlanner
from tests.run_fakes import (
    Decide,
    RecordingSink,
    Scripted,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    call_key,
    drive,
    driver,
    failure,
    ok,
    run_created,
)

SCOPE = "toy:read"


def _tool(name: str, field: str, kind: str, **extra: Any) -> ToolContract:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return ToolContract(
        name=name,
        version="1",
        description=name,
        scope=SCOPE,
        risk=Risk.READ_ONLY,
        declared_input=JsonSchema.of(schema),
        **extra,
    )


ITEMS = _tool("items", "count", "integer")
ECHO = _tool("echo", "text", "string", max_attempts=1)  # one attempt: a failure is final at once
CATALOGUE = catalogue_of(ITEMS, ECHO)


def listing(node_id: str, count: int) -> dict[str, Any]:
    return {"id": node_id, "tool": ITEMS.name, "args": {"count": count}}


def each(node_id: str, source: str) -> dict[str, Any]:
    return {
        "id": node_id,
        "tool": ECHO.name,
        "for_each": {"$ref": source, "pointer": "/items"},
        "args": {"text": {"$item": ""}},
    }


def items(count: int) -> dict[tuple[str, str], Scripted]:
    """The one call of ``items`` with ``count``, answering ``i0``, ``i1``, …"""
    return {call_key(ITEMS.name, {"count": count}): Scripted(ok({"items": [f"i{n}" for n in range(count)]}))}


def created(plan: list[dict[str, Any]], budgets: Budgets) -> RunCreated:
    return run_created(
        planner="scripted", scopes=[SCOPE], resource={}, proposal={"nodes": plan}, budgets=budgets
    )


OVER_THE_FANOUT = [listing("list", 33), each("fan", "list")]
THREE_OF_32 = [listing("list", 32), each("fan1", "list"), each("fan2", "list"), each("fan3", "list")]


# ---------------------------------------------------------------- the outputs planner (issue 26)


async def test_a_for_each_over_more_items_than_max_fanout_stops_the_run_with_fanout_limit() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(items(100_000))
    run = created([listing("list", 100_000), each("fan", "list")], Budgets(max_fanout=32))

    final = await drive(driver(sink, executor, OutputsPlanner(), catalogue=CATALOGUE), run)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.FANOUT_LIMIT)
    assert final.detail == "fan: budget max_fanout exhausted: 100000 > 32"
    [join] = sink.of(JoinStarted)
    assert join.interrupted_by is StopReason.FANOUT_LIMIT  # the joiner was asked, and answered Final
    assert sink.of(NodeExpanded) == []
    assert final.nodes["fan"].status is NodeStatus.CANCELLED
    outputs = final.result["outputs"]  # type: ignore[index]
    assert list(outputs) == ["list"]  # kept as partial: what ran, and no more
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)


async def test_three_for_each_of_32_under_max_nodes_64_stop_the_run_with_node_budget_exhausted() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(items(32))
    run = created(THREE_OF_32, Budgets(max_nodes=64, max_fanout=32))

    final = await drive(driver(sink, executor, OutputsPlanner(), catalogue=CATALOGUE), run)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.NODE_BUDGET_EXHAUSTED)
    assert final.detail == "fan2: budget max_nodes exhausted: 68 > 64"  # 4 plan nodes + 32 + 32
    assert [(event.node_id, event.count) for event in sink.of(NodeExpanded)] == [("fan1", 32)]
    assert executor.called == ["list"]  # the expansion that fitted started nothing either
    assert {final.nodes[node].status for node in final.order if node != "list"} == {NodeStatus.CANCELLED}
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)


# ---------------------------------------------------------------- whatever the joiner decides

CUT_SHORT = "fan: budget max_fanout exhausted: 33 > 32"


@pytest.mark.parametrize(
    ("plan", "budgets", "script", "reason", "detail"),
    [
        pytest.param(
            OVER_THE_FANOUT,
            Budgets(max_fanout=32),
            items(33),
            StopReason.FANOUT_LIMIT,
            CUT_SHORT,
            id="max_fanout",
        ),
        pytest.param(
            THREE_OF_32,
            Budgets(max_nodes=64),
            items(32),
            StopReason.NODE_BUDGET_EXHAUSTED,
            "fan2: budget max_nodes exhausted: 68 > 64",
            id="max_nodes",
        ),
        pytest.param(
            [listing("n0", 1), listing("n1", 1), listing("n2", 1)],
            Budgets(repeat_limit=2),
            items(1),
            StopReason.REPEATED_ACTION_FINGERPRINT,
            "n2: items with these arguments was proposed 3 times (limit 2)",
            id="repeat_limit",
        ),
    ],
)
async def test_a_verified_final_answer_after_a_limit_cut_the_round_short_stops_the_run_and_is_kept_as_partial(
    plan: list[dict[str, Any]],
    budgets: Budgets,
    script: dict[tuple[str, str], Scripted],
    reason: StopReason,
    detail: str,
) -> None:
    planner = ScriptedPlanner(Decide(Final({"first": "i0"}, citations=["i0"])))  # the run brings its plan
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    run = created(plan, budgets)

    final = await drive(driver(sink, executor, planner, catalogue=CATALOGUE), run)

    assert (final.status, final.stop_reason, final.detail) == (RunStatus.STOPPED, reason, detail)
    assert final.result == {"first": "i0"}
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)


@pytest.mark.parametrize(
    ("decision", "detail", "result"),
    [
        pytest.param(
            Final({"first": "i99"}, citations=["i99"]),
            f"{CUT_SHORT}; the answer cites what no tool output of this run contains: ['i99']",
            {"first": "i99"},
            id="final-citing-what-no-output-holds",
        ),
        pytest.param(
            NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "the planner gives up", {"first": "i0"}),
            CUT_SHORT,
            {"first": "i0"},
            id="needs-human",
        ),
        pytest.param(Replan("look at every item"), CUT_SHORT, None, id="replan"),
    ],
)
async def test_after_a_limit_cut_the_round_short_any_join_decision_stops_the_run_with_the_limits_reason(
    decision: JoinDecision, detail: str, result: dict[str, Any] | None
) -> None:
    planner = ScriptedPlanner(Decide(decision))  # a replan is not asked for: the limit stands
    sink, executor = RecordingSink(), ScriptedExecutor(items(33))
    run = created(OVER_THE_FANOUT, Budgets(max_fanout=32))

    final = await drive(driver(sink, executor, planner, catalogue=CATALOGUE), run)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.FANOUT_LIMIT)
    assert (final.detail, final.result) == (detail, result)
    assert final.round == 1
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)


async def test_a_limit_and_a_call_without_an_answer_stop_the_run_naming_both_and_keeping_no_result() -> None:
    """Failure is not evidence: the stop names the limit and the missing call, and keeps no result."""
    gate = asyncio.Event()
    script = {
        call_key(ECHO.name, {"text": "down"}): Scripted(failure(ErrorKind.TRANSIENT, "UPSTREAM_DOWN", "503")),
        call_key(ITEMS.name, {"count": 33}): Scripted(ok({"items": [f"i{n}" for n in range(33)]}), gate),
    }
    planner = ScriptedPlanner(Decide(Final({"first": "i0"}, citations=["i0"])))
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    down = {"id": "down", "tool": ECHO.name, "args": {"text": "down"}}
    run = created([down, *OVER_THE_FANOUT], Budgets(max_fanout=32))
    running = asyncio.create_task(drive(driver(sink, executor, planner, catalogue=CATALOGUE), run))
    await sink.reached(lambda state: state.nodes["down"].status is NodeStatus.FAILED)
    gate.set()  # the listing answers once the other call has failed for good

    final = await running

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.FANOUT_LIMIT)
    assert (
        final.detail
        == f"{CUT_SHORT}; evidence is incomplete: 1 call has no answer: down (echo: UPSTREAM_DOWN)"
    )
    assert final.result is None
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)

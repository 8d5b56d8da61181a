"""Every node that ends without an output is in the joiner's view, called or not (issue 35, item 4).

A ``for_each`` over what is not a list fails before any call and never expands; it was left out of both the
observations (it has no arguments) and the uncalled nodes (it is a group), so the outputs planner answered
with the nodes that ran and the run ended ``completed``.
"""

from __future__ import annotations

from typing import Any

from test_driver_interrupted import CATALOGUE, ECHO, ITEMS, created, each, items, listing

from dag.budget import Budgets
from dag.events import ErrorKind
from dag.states import NodeStatus, RunStatus, StopReason
from planner import NeedsHuman
from planner.base import Uncalled
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
)


def a_string(node_id: str) -> dict[str, Any]:
    """``items`` answering a string where ``for_each`` reads a list."""
    return {"id": node_id, "tool": ITEMS.name, "args": {"count": 1}}


async def test_a_for_each_over_a_string_stops_the_outputs_run_naming_the_node_and_its_reason() -> None:
    script = {call_key(ITEMS.name, {"count": 1}): Scripted(ok({"items": "not a list"}))}
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    run = created([a_string("list"), each("fan", "list")], Budgets())

    final = await drive(driver(sink, executor, OutputsPlanner(), catalogue=CATALOGUE), run)

    assert (final.status, final.stop_reason) == (RunStatus.NEEDS_HUMAN, StopReason.EVIDENCE_INCOMPLETE)
    assert final.detail == "1 node(s) have no output: fan (never called: FOR_EACH_NOT_A_LIST)"
    assert final.result is None
    assert final.nodes["fan"].status is NodeStatus.FAILED
    executor.assert_done()
    assert_log_rebuilds(sink, run, final)


async def test_the_joiner_is_shown_a_for_each_that_never_expanded_and_the_nodes_skipped_after_it() -> None:
    planner = ScriptedPlanner(Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "seen")))
    script = {call_key(ITEMS.name, {"count": 1}): Scripted(ok({"items": 7}))}
    after = {"id": "after", "tool": ECHO.name, "args": {"text": {"$ref": "fan", "pointer": "/0"}}}
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    run = created([a_string("list"), each("fan", "list"), after], Budgets())

    await drive(driver(sink, executor, planner, catalogue=CATALOGUE), run)

    planner.assert_done()
    [context] = planner.contexts
    assert [(node.node_id, node.status, node.reason) for node in context.uncalled] == [
        ("fan", NodeStatus.FAILED, "FOR_EACH_NOT_A_LIST"),
        ("after", NodeStatus.SKIPPED, "skipped"),
    ]
    assert all(isinstance(node, Uncalled) for node in context.uncalled)


async def test_an_expanded_for_each_is_represented_by_its_children_not_by_itself() -> None:
    planner = ScriptedPlanner(Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "seen")))
    failed = Scripted(failure(ErrorKind.BUSINESS, "NO_SUCH_ITEM", "no such item"))
    script = {**items(2), **{call_key(ECHO.name, {"text": f"i{n}"}): failed for n in range(2)}}
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    run = created([listing("list", 2), each("fan", "list")], Budgets())

    await drive(driver(sink, executor, planner, catalogue=CATALOGUE), run)

    [context] = planner.contexts
    assert context.uncalled == ()  # the children were called: they are observations
    [observations] = planner.observations
    assert [o.node_id for o in observations] == ["list", "fan[0]", "fan[1]"]

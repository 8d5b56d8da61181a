"""A supervisor that stops hands its runs over: calls in flight land and are recorded, nothing new is
dispatched, and the run is left unfinished for the next supervisor — which resumes it to the same end."""

from __future__ import annotations

import asyncio

import pytest

from actors.run.context import HandedOver
from dag.budget import Budgets
from dag.events import NodeDispatched, NodeSucceeded, RunFinished
from dag.retry import RetryPolicy
from dag.run_state import RunState, apply, fold
from dag.states import NodeStatus, RunStatus
from mcp_server.planner import CASE_TOOL
from planner import Final
from tests.c102 import C102_RESULT, CASE_OUTPUT
from tests.run_fakes import (
    CASE_ARGS,
    Decide,
    Propose,
    RecordingSink,
    Scripted,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    call_key,
    driver,
    ok,
    only,
    policy_node,
    run_created,
    snapshot_node,
    transient,
)

WAIT_S = 5.0


def succeeded(state: RunState, node_id: str) -> bool:
    return node_id in state.nodes and state.nodes[node_id].status is NodeStatus.SUCCEEDED


async def test_a_handover_lands_the_calls_in_flight_dispatches_nothing_more_and_leaves_the_run_live() -> None:
    # max_parallel=1: "policy" waits for "case", so it is what a driver that kept going would dispatch next.
    gate = asyncio.Event()
    planner = ScriptedPlanner(Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}))
    script = only("policy")
    script[call_key(CASE_TOOL, CASE_ARGS)] = Scripted(ok(CASE_OUTPUT), gate=gate)
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    run = driver(sink, executor, planner)
    created = run_created(planner="scripted", budgets=Budgets(max_parallel=1))
    driving = asyncio.create_task(run.drive(apply(None, created), last_seq=1))
    async with asyncio.timeout(WAIT_S):
        await executor.invoked["case"].wait()

    run.handover.set()
    await asyncio.sleep(0)  # the driver sees the handover while "case" is still out
    gate.set()
    with pytest.raises(HandedOver):
        await asyncio.wait_for(driving, WAIT_S)

    assert [event.node_id for event in sink.of(NodeSucceeded)] == ["case"]  # landed and recorded
    assert [event.node_id for event in sink.of(NodeDispatched)] == ["case"]  # nothing new went out
    assert sink.of(RunFinished) == []
    state = fold([created, *sink.events])
    assert state.status is RunStatus.RUNNING
    assert state.nodes["policy"].status is NodeStatus.PENDING
    assert executor.cancelled == []
    assert planner.errors == []


async def test_a_run_handed_over_mid_round_is_resumed_by_the_next_supervisor_to_the_same_result() -> None:
    gate = asyncio.Event()
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy", "docs", gates={"docs": gate}))
    created = run_created()
    first = driver(sink, executor)
    driving = asyncio.create_task(first.drive(apply(None, created), last_seq=1))
    await sink.reached(lambda state: succeeded(state, "case") and succeeded(state, "policy"))

    first.handover.set()
    gate.set()
    with pytest.raises(HandedOver):
        await asyncio.wait_for(driving, WAIT_S)
    handed = fold([created, *sink.events])
    assert handed.status is RunStatus.RUNNING

    # The next supervisor (a new driver over the same log) finishes it; nothing that succeeded runs again.
    resumed_executor = ScriptedExecutor(only("resolve[0]"))
    second = driver(sink, resumed_executor)
    final = await asyncio.wait_for(
        second.drive(handed, last_seq=1 + len(sink.events), recovered=("next", "first")), WAIT_S
    )

    assert (final.status, final.result) == (RunStatus.COMPLETED, C102_RESULT)
    assert resumed_executor.called == ["resolve[0]"]
    executor.assert_done()
    resumed_executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_retry_waiting_at_the_handover_is_left_for_the_next_supervisor() -> None:
    planner = ScriptedPlanner(Propose({"nodes": [snapshot_node("case")]}), Decide(Final({}, citations=[])))
    sink = RecordingSink()
    executor = ScriptedExecutor({call_key(CASE_TOOL, CASE_ARGS): [Scripted(transient())]})
    run = driver(sink, executor, planner, retry=RetryPolicy(base_s=30.0, cap_s=30.0))  # the retry waits long
    created = run_created(planner="scripted")
    driving = asyncio.create_task(run.drive(apply(None, created), last_seq=1))
    await sink.reached(
        lambda state: "case" in state.nodes and state.nodes["case"].status is NodeStatus.RETRYING
    )

    run.handover.set()
    with pytest.raises(HandedOver):
        await asyncio.wait_for(driving, WAIT_S)

    assert [event.attempt for event in sink.of(NodeDispatched)] == [1]
    assert fold([created, *sink.events]).nodes["case"].status is NodeStatus.RETRYING
    executor.assert_done()


async def test_a_planner_still_answering_at_the_handover_is_asked_again_by_the_next_supervisor() -> None:
    answering = asyncio.Event()

    class Slow:
        name = "scripted"

        async def propose(self, context: object) -> dict[str, object]:
            answering.set()
            await asyncio.sleep(60)
            raise AssertionError("never answers in this test")

        async def decide(self, context: object, observations: object) -> object:
            raise AssertionError("never asked")

    sink = RecordingSink()
    run = driver(sink, ScriptedExecutor({}), Slow())
    created = run_created(planner="scripted")
    driving = asyncio.create_task(run.drive(apply(None, created), last_seq=1))
    async with asyncio.timeout(WAIT_S):
        await answering.wait()

    run.handover.set()
    with pytest.raises(HandedOver):
        await asyncio.wait_for(driving, WAIT_S)

    assert fold([created, *sink.events]).status is RunStatus.PLANNING


async def test_a_plan_accepted_just_before_the_handover_is_stored_and_not_asked_for_again() -> None:
    plan = {"nodes": [snapshot_node("case")]}

    class HandsOverAsItAnswers:
        name = "scripted"
        stopping = asyncio.Event()

        async def propose(self, context: object) -> dict[str, object]:
            self.stopping.set()  # the supervisor starts stopping while the planner answers
            return plan

        async def decide(self, context: object, observations: object) -> object:
            raise AssertionError("never asked")

    planner = HandsOverAsItAnswers()
    sink, executor = RecordingSink(), ScriptedExecutor({})
    run = driver(sink, executor, planner)
    planner.stopping = run.handover
    created = run_created(planner="scripted")
    with pytest.raises(HandedOver):
        await asyncio.wait_for(run.drive(apply(None, created), last_seq=1), WAIT_S)

    assert [event.kind for event in sink.events] == ["planning_started", "plan_accepted"]
    assert fold([created, *sink.events]).status is RunStatus.RUNNING  # resumed without asking a planner
    assert executor.calls == []

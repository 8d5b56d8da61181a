"""Run metrics without Ray: the facts a recorded run establishes, counted once, and only once stored."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from actors.observe.metrics import CallOutcome, report
from dag.budget import Budgets
from dag.events import ErrorKind, RunEvent
from dag.run_state import apply, fold
from dag.states import NodeStatus, RunStatus, StopReason
from mcp_server.contracts import SCOPE_CASES, SCOPE_POLICIES
from mcp_server.planner import CASE_TOOL, DOCUMENTS_TOOL, POLICY_TOOL, RESOLVE_TOOL
from planner import Final, Replan
from tests.c102 import C102_RESULT, CASE_OUTPUT, document
from tests.run_fakes import (
    CASE_ARGS,
    WAIT_S,
    Decide,
    Propose,
    RecordingSink,
    Scripted,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    c102_script,
    call_key,
    drive,
    driver,
    ok,
    only,
    policy_node,
    run_created,
    snapshot_node,
    transient,
)

Fact = tuple[str, ...]


class RecordingMetrics:
    """A RunMetrics that keeps every fact it is told, as tuples the test compares whole."""

    def __init__(self) -> None:
        self.facts: Counter[Fact] = Counter()
        self.latencies: list[tuple[str, CallOutcome, float]] = []

    def run_started(self, planner: str) -> None:
        self.facts["run_started", planner] += 1

    def run_finished(self, status: RunStatus, stop_reason: StopReason | None) -> None:
        self.facts["run_finished", status.value, stop_reason.value if stop_reason else "none"] += 1

    def run_recovered(self) -> None:
        self.facts["run_recovered",] += 1

    def node_finished(self, tool: str, status: NodeStatus) -> None:
        self.facts["node_finished", tool, status.value] += 1

    def tool_call_finished(self, tool: str, outcome: CallOutcome, duration_ms: float) -> None:
        self.latencies.append((tool, outcome, duration_ms))

    def retry_scheduled(self, tool: str, error_kind: ErrorKind) -> None:
        self.facts["retry_scheduled", tool, error_kind.value] += 1

    def node_denied(self, tool: str, rule_id: str) -> None:
        self.facts["node_denied", tool, rule_id] += 1

    def budget_stop(self, budget: str) -> None:
        self.facts["budget_stop", budget] += 1

    def unknown_operations(self, count: int, oldest_age_s: float) -> None:
        self.facts["unknown_operations", str(count)] += 1


def finished(tool: str, status: str) -> Fact:
    return ("node_finished", tool, status)


SNAPSHOT_ONLY = {"nodes": [snapshot_node("case")]}


# ---------------------------------------------------------------- what a run counts


async def test_a_c102_run_counts_its_end_and_each_tool_node_once_but_not_its_expanded_for_each_parent() -> (
    None
):
    metrics = RecordingMetrics()
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created()

    final = await drive(driver(sink, executor, metrics=metrics), created)

    assert final.result == C102_RESULT
    assert metrics.facts == Counter(
        {
            ("run_finished", "completed", "none"): 1,
            finished(CASE_TOOL, "succeeded"): 1,
            finished(POLICY_TOOL, "succeeded"): 1,
            finished(DOCUMENTS_TOOL, "succeeded"): 1,
            finished(RESOLVE_TOOL, "succeeded"): 1,  # resolve[0]; the resolve group is not a call
        }
    )
    assert sorted(metrics.latencies) == sorted(
        (tool, "succeeded", 40.0) for tool in (CASE_TOOL, POLICY_TOOL, DOCUMENTS_TOOL, RESOLVE_TOOL)
    )
    assert_log_rebuilds(sink, created, final)


async def test_a_denied_node_is_counted_by_tool_and_rule_and_its_never_expanded_dependent_as_skipped() -> (
    None
):
    metrics = RecordingMetrics()
    sink, executor = RecordingSink(), ScriptedExecutor(only("case", "policy"))
    created = run_created(scopes=(SCOPE_CASES, SCOPE_POLICIES))

    final = await drive(driver(sink, executor, metrics=metrics), created)

    assert metrics.facts == Counter(
        {
            ("node_denied", DOCUMENTS_TOOL, "scope.missing"): 1,
            ("run_finished", "needs_human", "INSUFFICIENT_EVIDENCE"): 1,
            finished(CASE_TOOL, "succeeded"): 1,
            finished(POLICY_TOOL, "succeeded"): 1,
            finished(DOCUMENTS_TOOL, "denied"): 1,
            finished(RESOLVE_TOOL, "skipped"): 1,
        }
    )
    assert sorted(tool for tool, _, _ in metrics.latencies) == sorted([CASE_TOOL, POLICY_TOOL])
    assert_log_rebuilds(sink, created, final)


async def test_a_retried_call_counts_a_retry_and_both_attempts_latencies_but_finishes_its_node_once() -> None:
    metrics = RecordingMetrics()
    sink = RecordingSink()
    executor = ScriptedExecutor(
        {call_key(CASE_TOOL, CASE_ARGS): [Scripted(transient()), Scripted(ok(CASE_OUTPUT))]}
    )
    planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY), Decide(Final({}, citations=[])))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner, metrics=metrics), created)

    assert metrics.facts == Counter(
        {
            ("retry_scheduled", CASE_TOOL, "transient"): 1,
            finished(CASE_TOOL, "succeeded"): 1,
            ("run_finished", "completed", "none"): 1,
        }
    )
    assert metrics.latencies == [(CASE_TOOL, "retried", 10_000.0), (CASE_TOOL, "succeeded", 40.0)]
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_budget_that_cuts_the_round_short_and_then_stops_the_run_is_one_budget_stop() -> None:
    metrics = RecordingMetrics()
    docs_gate = asyncio.Event()  # "case" and "policy" land before the fanout is decided
    script = only("case", "policy")
    three = {"case_id": "C-102", "documents": [document(f"DOC-C102-00{i}") for i in (3, 4, 5)]}
    script[call_key(DOCUMENTS_TOOL, CASE_ARGS)] = Scripted(ok(three), docs_gate)
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(budgets=Budgets(max_fanout=2))
    running = asyncio.create_task(drive(driver(sink, executor, metrics=metrics), created))
    await sink.reached(lambda s: all(n in s.nodes and s.nodes[n].status.terminal for n in ("case", "policy")))
    docs_gate.set()

    final = await running

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.FANOUT_LIMIT)
    assert metrics.facts == Counter(
        {
            ("budget_stop", "max_fanout"): 1,
            ("run_finished", "stopped", "FANOUT_LIMIT"): 1,
            finished(CASE_TOOL, "succeeded"): 1,
            finished(POLICY_TOOL, "succeeded"): 1,
            finished(DOCUMENTS_TOOL, "succeeded"): 1,
            finished(RESOLVE_TOOL, "cancelled"): 1,  # never expanded: closed by run_finished
        }
    )
    assert_log_rebuilds(sink, created, final)


async def test_a_budget_that_stops_the_run_at_the_join_is_a_budget_stop_named_for_its_budget() -> None:
    metrics = RecordingMetrics()
    planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY), Decide(Replan("need the policy")))
    sink, executor = RecordingSink(), ScriptedExecutor(only("case"))
    created = run_created(planner="scripted", budgets=Budgets(max_replans=0))

    final = await drive(driver(sink, executor, planner, metrics=metrics), created)

    assert metrics.facts == Counter(
        {
            ("budget_stop", "max_replans"): 1,
            ("run_finished", "stopped", "REPLAN_LIMIT"): 1,
            finished(CASE_TOOL, "succeeded"): 1,
        }
    )
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


def test_a_created_run_counts_as_started_by_its_planner_and_nothing_else() -> None:
    metrics = RecordingMetrics()
    created = run_created(planner="scripted")
    state = apply(None, created)

    report(metrics, [(None, created, state)])

    assert metrics.facts == Counter({("run_started", "scripted"): 1})
    assert metrics.latencies == []


# ---------------------------------------------------------------- counted once, and only once stored


async def test_a_recovered_run_counts_the_takeover_and_what_follows_but_nothing_recorded_before_it() -> None:
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}), Decide(Final({}, citations=[]))
    )
    never = asyncio.Event()  # "case" is still in flight when its supervisor dies
    first_sink, first_metrics = RecordingSink(), RecordingMetrics()
    first_executor = ScriptedExecutor(only("case", "policy", gates={"case": never}))
    created = run_created(planner="scripted")
    crashed = asyncio.create_task(
        drive(driver(first_sink, first_executor, planner, metrics=first_metrics), created)
    )
    await first_sink.reached(lambda s: "policy" in s.nodes and s.nodes["policy"].status.terminal)
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    stored: list[RunEvent] = [created, *first_sink.events]
    metrics = RecordingMetrics()
    second_sink = RecordingSink(first_seq=len(stored) + 1)
    second = driver(second_sink, ScriptedExecutor(only("case")), planner, metrics=metrics)

    final = await asyncio.wait_for(
        second.drive(fold(stored), last_seq=len(stored), recovered=("supervisor-b", "supervisor-a")), WAIT_S
    )

    assert final.status is RunStatus.COMPLETED
    assert first_metrics.facts == Counter({finished(POLICY_TOOL, "succeeded"): 1})
    assert metrics.facts == Counter(
        {
            ("run_recovered",): 1,
            ("retry_scheduled", CASE_TOOL, "transient"): 1,  # the lost attempt, dispatched again
            finished(CASE_TOOL, "succeeded"): 1,
            ("run_finished", "completed", "none"): 1,
        }
    )
    assert metrics.latencies == [(CASE_TOOL, "succeeded", 40.0)]  # the lost attempt returned nothing
    planner.assert_done()


async def test_a_transition_the_sink_refused_is_never_counted() -> None:
    def has_success(events: Sequence[RunEvent]) -> bool:
        return any(event.kind == "node_succeeded" for event in events)

    metrics = RecordingMetrics()
    sink = RecordingSink(fail_on=has_success, failures=1)
    executor = ScriptedExecutor(only("case"))
    planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY))
    created = run_created(planner="scripted")

    final = await drive(driver(sink, executor, planner, metrics=metrics), created)

    assert (final.status, final.stop_reason) == (RunStatus.FAILED, StopReason.INTERNAL_ERROR)
    assert len(sink.refused) == 1
    assert metrics.facts == Counter(
        {
            finished(CASE_TOOL, "cancelled"): 1,  # what was stored: the run ended with the call unrecorded
            ("run_finished", "failed", "INTERNAL_ERROR"): 1,
        }
    )
    assert metrics.latencies == []
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


class BrokenExporter(RecordingMetrics):
    def node_finished(self, tool: str, status: NodeStatus) -> None:
        raise RuntimeError("the metrics exporter is gone")


async def test_a_failing_metrics_exporter_neither_fails_the_run_nor_stops_the_other_counts() -> None:
    metrics = BrokenExporter()
    sink, executor = RecordingSink(), ScriptedExecutor(c102_script())
    created = run_created()

    final = await drive(driver(sink, executor, metrics=metrics), created)

    assert (final.status, final.result) == (RunStatus.COMPLETED, C102_RESULT)
    assert metrics.facts == Counter({("run_finished", "completed", "none"): 1})
    assert len(metrics.latencies) == 4
    assert_log_rebuilds(sink, created, final)

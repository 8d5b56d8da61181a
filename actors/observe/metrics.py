"""Run metrics: the control plane's facts as Ray custom metrics (``ray.util.metrics``).

The facts are read off transitions once they are recorded: ``RunRecorder`` reports each event after it
is stored, and ``RunService`` reports a run's creation once it is inserted. A run rebuilt from its stored
events after a crash is folded, not reported, so recovery counts nothing twice; only what the recovering
supervisor records itself (the recovery, redispatches, what happens next) is new.

Tags stay low in cardinality: tools, statuses, stop reasons, policy rules and budget names — never a run,
node, tenant or case id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Final, Literal, Protocol, assert_never

from dag.budget import STOP_REASON_OF_BUDGET
from dag.events import (
    AgentEnded,
    AgentStarted,
    ErrorKind,
    GroupSettled,
    JoinStarted,
    ModelUsed,
    NodeDenied,
    NodeDispatched,
    NodeExpanded,
    NodeFailed,
    NodeRetryScheduled,
    NodeReused,
    NodeSkipped,
    NodeSucceeded,
    NodeTaskUpdated,
    PlanAccepted,
    PlanCompleted,
    PlanningStarted,
    PlanNodeAccepted,
    PlanReviewed,
    PlanReviewRequested,
    QuestionAnswered,
    QuestionAsked,
    RunContinued,
    RunCreated,
    RunEvent,
    RunFinished,
    RunParked,
    RunRecovered,
    RunResumed,
    RunWaiting,
    RunWoken,
    event_node_id,
)
from dag.run_state import RunState
from dag.states import NodeStatus, RunStatus, StopReason

log = logging.getLogger(__name__)

CallOutcome = Literal["succeeded", "failed", "retried"]
"""How one tool call of a node ended: its node succeeded or failed, or another attempt was scheduled."""

BUDGET_OF_STOP_REASON: Final = {reason: budget for budget, reason in STOP_REASON_OF_BUDGET.items()}

LATENCY_BOUNDARIES_MS: Final = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000)
"""Tool calls take milliseconds on loopback and seconds against a slow service; a call times out after its
contract's ``timeout_s`` (10 s by default) plus the supervisor's slack."""

NO_STOP_REASON: Final = "none"
"""The ``stop_reason`` tag of a run that ended without one (a completed run)."""


class RunMetrics(Protocol):
    """Where the control plane's facts are counted. Each method is one fact, called once it is recorded."""

    def run_started(self, planner: str) -> None: ...

    def run_finished(self, status: RunStatus, stop_reason: StopReason | None) -> None: ...

    def run_recovered(self) -> None: ...

    def node_finished(self, tool: str, status: NodeStatus) -> None: ...

    def tool_call_finished(self, tool: str, outcome: CallOutcome, duration_ms: float) -> None: ...

    def retry_scheduled(self, tool: str, error_kind: ErrorKind) -> None: ...

    def node_denied(self, tool: str, rule_id: str) -> None: ...

    def budget_stop(self, budget: str) -> None: ...

    def unknown_operations(self, count: int, oldest_age_s: float) -> None: ...


class NoMetrics:
    """Counts nothing: the default where nobody reads metrics (the CLI's local runs, tests)."""

    def run_started(self, planner: str) -> None:
        pass

    def run_finished(self, status: RunStatus, stop_reason: StopReason | None) -> None:
        pass

    def run_recovered(self) -> None:
        pass

    def node_finished(self, tool: str, status: NodeStatus) -> None:
        pass

    def tool_call_finished(self, tool: str, outcome: CallOutcome, duration_ms: float) -> None:
        pass

    def retry_scheduled(self, tool: str, error_kind: ErrorKind) -> None:
        pass

    def node_denied(self, tool: str, rule_id: str) -> None:
        pass

    def budget_stop(self, budget: str) -> None:
        pass

    def unknown_operations(self, count: int, oldest_age_s: float) -> None:
        pass


NO_METRICS: Final = NoMetrics()


Transition = tuple[RunState | None, RunEvent, RunState]
"""An event with the run's state before (``None`` for ``run_created``) and after it."""


def report(metrics: RunMetrics, transitions: Iterable[Transition]) -> None:
    """Count the facts of recorded transitions. A failing exporter never fails a run that is already stored."""
    for before, event, after in transitions:
        try:
            count(metrics, before, event, after)
        except Exception:
            log.warning("could not count %s of run %s", event.kind, after.run_id, exc_info=True)


def count(metrics: RunMetrics, before: RunState | None, event: RunEvent, after: RunState) -> None:
    """The facts one recorded event establishes."""
    if before is None:
        if isinstance(event, RunCreated):
            metrics.run_started(after.planner)
        return
    match event:
        case NodeSucceeded():
            _call_finished(metrics, after, event.node_id, "succeeded", event.started_at, event.finished_at)
        case NodeFailed():
            _call_finished(metrics, after, event.node_id, "failed", event.started_at, event.finished_at)
        case NodeRetryScheduled():
            _call_finished(metrics, after, event.node_id, "retried", event.started_at, event.finished_at)
            metrics.retry_scheduled(after.nodes[event.node_id].tool, event.error.kind)
        case NodeDenied():
            metrics.node_denied(event.tool, event.decision.rule_id)
        case JoinStarted():
            if event.interrupted_by in BUDGET_OF_STOP_REASON:
                metrics.budget_stop(BUDGET_OF_STOP_REASON[event.interrupted_by])
        case RunFinished():
            metrics.run_finished(event.status, event.stop_reason)
            # A limit that interrupted the round being joined was counted at its join_started.
            if event.stop_reason in BUDGET_OF_STOP_REASON and event.stop_reason is not before.interrupted_by:
                metrics.budget_stop(BUDGET_OF_STOP_REASON[event.stop_reason])
        case RunRecovered():
            metrics.run_recovered()
        case (
            RunCreated()
            | RunContinued()
            | PlanningStarted()
            | PlanAccepted()
            | PlanNodeAccepted()
            | PlanCompleted()
            | ModelUsed()
            | NodeExpanded()
            | NodeDispatched()
            | NodeReused()
            | NodeSkipped()
            | NodeTaskUpdated()
            | AgentStarted()
            | AgentEnded()
            | GroupSettled()
            | RunWaiting()
            | RunResumed()
            | RunParked()
            | RunWoken()
            | PlanReviewRequested()
            | PlanReviewed()
            | QuestionAsked()
            | QuestionAnswered()
        ):
            pass
        case _:
            assert_never(event)
    _nodes_finished(metrics, before, event, after)


def _nodes_finished(metrics: RunMetrics, before: RunState, event: RunEvent, after: RunState) -> None:
    """Nodes that ``event`` ended: its own node, or every node still open when the run finishes.

    A ``for_each`` parent that expanded is not counted (its children are: they made the calls); one that
    ended before expanding (skipped, cancelled, failed) is, as the one node of its tool that it was.
    """
    node_ids: Iterable[str]
    if isinstance(event, RunFinished):
        node_ids = after.nodes
    else:
        node_id = event_node_id(event)
        node_ids = (node_id,) if node_id is not None else ()
    for node_id in node_ids:
        node, earlier = after.nodes[node_id], before.nodes.get(node_id)
        if earlier is None or earlier.status.terminal or not node.status.terminal:
            continue
        if node.is_group and earlier.status is not NodeStatus.PENDING:
            continue
        metrics.node_finished(node.tool, node.status)


def _call_finished(
    metrics: RunMetrics,
    after: RunState,
    node_id: str,
    outcome: CallOutcome,
    started_at: datetime | None,
    finished_at: datetime | None,
) -> None:
    """One tool call of a node returned. A node that ended without a call (refused arguments, an identical
    action that failed before) has no call times, and no latency to count."""
    if started_at is None or finished_at is None:
        return
    duration_ms = max(0.0, (finished_at - started_at).total_seconds() * 1000)
    metrics.tool_call_finished(after.nodes[node_id].tool, outcome, duration_ms)

"""A node's call that runs as an MCP task: its handle is state of the attempt in flight, and only of it."""

from __future__ import annotations

import re

import pytest
from dag_run_builders import AT, CASE_ID, CASE_TOOL, dispatched, failed, running, succeeded

from dag.errors import EventRefused
from dag.events import NodeRetryScheduled, NodeTaskUpdated, RunEvent
from dag.run_state import apply

ARGS = {"case_id": CASE_ID}
PLAN = {"nodes": [{"id": "one", "tool": CASE_TOOL, "args": ARGS}]}
TASK = {
    "server": "s",
    "task_id": "t-1",
    "status": "working",
    "message": "Gathering sources...",
    "session": "x",
}


def task_updated(attempt: int = 1, **changes: str) -> NodeTaskUpdated:
    return NodeTaskUpdated(at=AT, node_id="one", attempt=attempt, task={**TASK, **changes})


def test_the_last_reported_task_is_the_nodes_until_its_next_attempt_is_dispatched() -> None:
    state = running(PLAN, dispatched("one", CASE_TOOL, ARGS), task_updated())
    assert state.nodes["one"].task == TASK

    state = apply(state, task_updated(message="Analyzing content..."))
    assert state.nodes["one"].task["message"] == "Analyzing content..."  # type: ignore[index]

    error = failed("one", "TASK_LOST").error
    state = apply(state, NodeRetryScheduled(at=AT, node_id="one", attempt=1, error=error, delay_s=0.0))
    retried = dispatched("one", CASE_TOOL, ARGS).model_copy(update={"attempt": 2})
    assert apply(state, retried).nodes["one"].task is None  # a new attempt makes a new call


@pytest.mark.parametrize(
    ("events", "why"),
    [
        ([], "no attempt 1 in flight (attempt 0, pending)"),  # never dispatched
        ([dispatched("one", CASE_TOOL, ARGS), succeeded("one", {})], "(attempt 1, succeeded)"),
    ],
)
def test_a_task_is_refused_for_a_node_with_no_attempt_in_flight(events: list[RunEvent], why: str) -> None:
    state = running(PLAN, *events)
    with pytest.raises(EventRefused, match=re.escape(why)):
        apply(state, task_updated())


def test_a_task_is_refused_for_another_attempt_than_the_one_in_flight() -> None:
    state = running(PLAN, dispatched("one", CASE_TOOL, ARGS))
    with pytest.raises(EventRefused, match="no attempt 2 in flight"):
        apply(state, task_updated(attempt=2))

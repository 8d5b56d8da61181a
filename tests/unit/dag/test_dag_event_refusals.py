"""The reducer refuses an event the run cannot take with a typed error of the core, naming the event."""

from __future__ import annotations

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_TOOL,
    accepted_events,
    dispatched,
    failed,
    run_created,
)

from dag.errors import EventRefused, RaydagError
from dag.events import (
    NodeDispatched,
    NodeReused,
    PlanAccepted,
    PlanCompleted,
    PlanningStarted,
    PlanNodeAccepted,
    RunEvent,
    RunFinished,
    RunRecovered,
)
from dag.fingerprint import action_fingerprint
from dag.policy import Decision
from dag.run_state import apply, fold
from dag.states import RunStatus

ARGS = {"case_id": CASE_ID}
PLAN = {
    "nodes": [{"id": "one", "tool": CASE_TOOL, "args": ARGS}, {"id": "two", "tool": CASE_TOOL, "args": ARGS}]
}
NODE = {"id": "one", "tool": CASE_TOOL, "args": ARGS}
ALLOW = Decision(allowed=True, rule_id="allow.read_only_in_scope", reason="test")


def second_dispatch(attempt: int) -> NodeDispatched:
    fingerprint = action_fingerprint(CASE_TOOL, ARGS)
    return NodeDispatched(
        at=AT,
        node_id="one",
        tool=CASE_TOOL,
        args=ARGS,
        fingerprint=fingerprint,
        attempt=attempt,
        decision=ALLOW,
    )


REFUSED: dict[str, tuple[list[RunEvent], str, str]] = {
    "first-event-not-run-created": ([PlanningStarted(at=AT, round=1)], "planning_started", "first event"),
    "run-created-twice": ([run_created(), run_created()], "run_created", "may only start a run"),
    "plan-of-another-round": (
        [run_created(), PlanningStarted(at=AT, round=1), PlanAccepted(at=AT, round=2, plan=PLAN)],
        "plan_accepted",
        "plan for round 2 accepted during round 1",
    ),
    "streamed-node-of-another-round": (
        [run_created(), PlanningStarted(at=AT, round=1), PlanNodeAccepted(at=AT, round=2, node=NODE)],
        "plan_node_accepted",
        "plan node for round 2",
    ),
    "stream-end-of-another-round": (
        [run_created(), PlanningStarted(at=AT, round=1), PlanCompleted(at=AT, round=3, complete=True)],
        "plan_completed",
        "plan of round 3 completed during round 1",
    ),
    "streamed-node-twice": (
        [
            run_created(),
            PlanningStarted(at=AT, round=1),
            PlanNodeAccepted(at=AT, round=1, node=NODE),
            PlanNodeAccepted(at=AT, round=1, node=NODE),
        ],
        "plan_node_accepted",
        "node one is already in the run",
    ),
    "attempt-out-of-order": (
        [*accepted_events(PLAN), second_dispatch(2)],
        "node_dispatched",
        "one: attempt 2 after 0",
    ),
    "reuse-of-a-node-without-output": (
        [
            *accepted_events(PLAN),
            dispatched("one", CASE_TOOL, ARGS),
            failed("one"),
            NodeReused(
                at=AT, node_id="two", tool=CASE_TOOL, args=ARGS, fingerprint="f", source_node_id="one"
            ),
        ],
        "node_reused",
        "which has no output",
    ),
    "recovery-of-a-finished-run": (
        [
            *accepted_events(PLAN),
            RunFinished(at=AT, status=RunStatus.CANCELLED),
            RunRecovered(at=AT, owner="b", previous_owner="a"),
        ],
        "run_recovered",
        "a finished run cannot be recovered",
    ),
    "finished-without-a-terminal-status": (
        [*accepted_events(PLAN), RunFinished(at=AT, status=RunStatus.JOINING)],
        "run_finished",
        "needs a terminal status",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_an_event_the_run_cannot_take_is_refused_with_event_refused_naming_its_kind(case: str) -> None:
    events, kind, reason = REFUSED[case]

    with pytest.raises(EventRefused, match=reason) as refused:
        fold(events)

    assert refused.value.kind == kind
    assert reason in refused.value.reason
    assert isinstance(refused.value, RaydagError)


def test_folding_no_event_at_all_is_refused_without_a_kind() -> None:
    with pytest.raises(EventRefused, match="at least one event") as refused:
        fold([])

    assert refused.value.kind is None


def test_a_refusal_is_still_a_value_error_for_callers_that_caught_one() -> None:
    with pytest.raises(ValueError, match="first event"):
        apply(None, PlanningStarted(at=AT, round=1))

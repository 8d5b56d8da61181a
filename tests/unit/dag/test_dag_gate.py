"""``gate``: an identical action runs once per run, and may be proposed only ``repeat_limit`` times."""

from __future__ import annotations

from typing import Any

from dag_run_builders import AT, CASE_ID, CASE_OUTPUT, CASE_TOOL, dispatched, failed, run_created, succeeded

from dag.budget import Budgets
from dag.events import ErrorKind, NodeError, NodeFailed, NodeReused, PlanAccepted, PlanningStarted, RunEvent
from dag.fingerprint import action_fingerprint
from dag.gate import AlreadyFailed, Dispatch, RepeatLimit, Reuse, Wait, gate
from dag.run_state import RunState, fold

CASE_ARGS = {"case_id": CASE_ID}
FINGERPRINT = action_fingerprint(CASE_TOOL, CASE_ARGS)
NOTHING: frozenset[str] = frozenset()
NONE_DECIDED: dict[str, int] = {}


def identical_events(count: int = 3, repeat_limit: int = 3) -> list[RunEvent]:
    """The start of a run whose plan has ``count`` nodes n0, n1, … making the same call."""
    plan: dict[str, Any] = {
        "nodes": [{"id": f"n{index}", "tool": CASE_TOOL, "args": CASE_ARGS} for index in range(count)]
    }
    return [
        run_created(budgets=Budgets(repeat_limit=repeat_limit)),
        PlanningStarted(at=AT, round=1),
        PlanAccepted(at=AT, round=1, plan=plan),
    ]


def identical_nodes(*more: RunEvent, count: int = 3, repeat_limit: int = 3) -> RunState:
    return fold([*identical_events(count, repeat_limit), *more])


def reused(node_id: str, source: str = "n0") -> NodeReused:
    return NodeReused(
        at=AT, node_id=node_id, tool=CASE_TOOL, args=CASE_ARGS, fingerprint=FINGERPRINT, source_node_id=source
    )


def test_a_new_action_is_dispatched() -> None:
    assert gate(identical_nodes(), FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Dispatch()


def test_an_action_dispatched_in_the_same_step_waits() -> None:
    assert gate(identical_nodes(), FINGERPRINT, dispatching={FINGERPRINT}, decided=NONE_DECIDED) == Wait()


def test_an_action_whose_source_is_still_running_waits() -> None:
    state = identical_nodes(dispatched("n0", CASE_TOOL, CASE_ARGS))

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Wait()


def test_an_action_whose_source_succeeded_reuses_its_output() -> None:
    state = identical_nodes(dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT))

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Reuse("n0")


def test_an_action_the_tool_refused_is_not_tried_again() -> None:
    state = identical_nodes(dispatched("n0", CASE_TOOL, CASE_ARGS), refused("n0"))

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == AlreadyFailed("n0")


def test_an_action_that_failed_without_an_answer_is_dispatched_again_and_then_executed_by_the_new_node() -> (
    None
):
    state = identical_nodes(dispatched("n0", CASE_TOOL, CASE_ARGS), failed("n0"))

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Dispatch()
    again = fold(
        [
            *identical_events(),
            dispatched("n0", CASE_TOOL, CASE_ARGS),
            failed("n0"),
            dispatched("n1", CASE_TOOL, CASE_ARGS),
        ]
    )
    assert again.fingerprints[FINGERPRINT] == "n1"
    assert gate(again, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Wait()


def refused(node_id: str) -> NodeFailed:
    error = NodeError(kind=ErrorKind.BUSINESS, code="CASE_ARCHIVED", message="the case is archived")
    return NodeFailed(at=AT, node_id=node_id, error=error, started_at=AT, finished_at=AT)


def test_another_action_is_dispatched_even_when_one_was_reused() -> None:
    state = identical_nodes(
        dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT), reused("n1")
    )
    other = action_fingerprint(CASE_TOOL, {"case_id": "C-103"})

    assert gate(state, other, dispatching=NOTHING, decided=NONE_DECIDED) == Dispatch()


def test_the_proposal_after_repeat_limit_hits_the_limit() -> None:
    # n0 dispatched (1), n1 reused (2): with repeat_limit=2, n2 would be the third proposal.
    state = identical_nodes(
        dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT), reused("n1"), repeat_limit=2
    )

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == RepeatLimit(
        proposals=3, limit=2
    )


def test_the_proposal_at_repeat_limit_is_still_reused() -> None:
    state = identical_nodes(
        dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT), repeat_limit=2
    )

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == Reuse("n0")


def test_a_repeat_limit_of_one_refuses_the_second_proposal_even_of_a_failed_action() -> None:
    state = identical_nodes(dispatched("n0", CASE_TOOL, CASE_ARGS), failed("n0"), repeat_limit=1)

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided=NONE_DECIDED) == RepeatLimit(
        proposals=2, limit=1
    )


def test_proposals_decided_earlier_in_the_same_step_count_toward_the_limit() -> None:
    # n0 ran (1); n1 was decided a moment ago in this step (2, not yet recorded): n2 is the third.
    state = identical_nodes(
        dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT), repeat_limit=2
    )

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided={FINGERPRINT: 1}) == RepeatLimit(3, 2)


def test_proposals_of_another_action_decided_in_the_step_do_not_count() -> None:
    state = identical_nodes(
        dispatched("n0", CASE_TOOL, CASE_ARGS), succeeded("n0", CASE_OUTPUT), repeat_limit=2
    )
    other = action_fingerprint(CASE_TOOL, {"case_id": "C-103"})

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided={other: 5}) == Reuse("n0")

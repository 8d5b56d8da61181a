"""Plan review's decisions: what a hash binds, what a yes covers, who may decide, and how the run waits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dag_run_builders import AT, CASE_ID, CASE_TOOL, POLICY_TOOL, run_created

from dag.errors import EventRefused
from dag.events import PlanAccepted, PlanningStarted, PlanReviewed, PlanReviewRequested, RunEvent
from dag.plan import Plan
from dag.policy import TenantPolicy
from dag.review import (
    ReviewRefusal,
    ReviewState,
    ReviewView,
    call_signature,
    plan_hash,
    review_refusal,
    unreviewed,
)
from dag.run_state import fold
from dag.states import RunStatus

ARGS = {"case_id": CASE_ID}
PLAN = {
    "nodes": [
        {"id": "case", "tool": CASE_TOOL, "args": ARGS},
        {"id": "policy", "tool": POLICY_TOOL, "args": {"case_id": {"$ref": "case", "path": "/case_id"}}},
    ]
}
HASH = plan_hash(PLAN)


def test_any_change_to_the_plan_changes_its_hash_and_key_order_does_not() -> None:
    renamed = {"nodes": [{**PLAN["nodes"][0], "id": "snapshot"}, PLAN["nodes"][1]]}
    other_args = {"nodes": [{**PLAN["nodes"][0], "args": {"case_id": "C-999"}}, PLAN["nodes"][1]]}
    reordered_keys = {"nodes": [dict(reversed(list(node.items()))) for node in PLAN["nodes"]]}

    assert plan_hash(renamed) != HASH
    assert plan_hash(other_args) != HASH
    assert plan_hash(reordered_keys) == HASH


def test_a_yes_covers_a_call_not_a_name_so_a_replan_waits_only_for_what_is_new() -> None:
    first = Plan.parse(PLAN)
    approved = [call_signature(node) for node in first.nodes]
    replan = Plan.parse(
        {
            "nodes": [
                {"id": "again", "tool": CASE_TOOL, "args": ARGS, "after": []},  # the same call, renamed
                {"id": "other", "tool": CASE_TOOL, "args": {"case_id": "C-103"}},  # another case: new
            ]
        }
    )

    assert unreviewed(first, ()) == ("case", "policy")
    assert unreviewed(first, approved) == ()
    assert unreviewed(replan, approved) == ("other",)


def view(state: ReviewState = ReviewState.AWAITING, *, subject: str = "requester") -> ReviewView:
    return ReviewView(state=state, plan_hash=HASH, subject=subject, expires_at=AT + timedelta(hours=1))


@pytest.mark.parametrize(
    ("review", "quoted", "reviewer", "policy", "expected"),
    [
        (view(), HASH, "reviewer", TenantPolicy(), None),
        (view(), "0" * 64, "reviewer", TenantPolicy(), ReviewRefusal.HASH_MISMATCH),
        (view(ReviewState.APPROVED), HASH, "reviewer", TenantPolicy(), ReviewRefusal.ALREADY_DECIDED),
        (view(ReviewState.REJECTED), HASH, "reviewer", TenantPolicy(), ReviewRefusal.ALREADY_DECIDED),
        (view(ReviewState.EXPIRED), HASH, "reviewer", TenantPolicy(), ReviewRefusal.EXPIRED),
        (view(), HASH, "requester", TenantPolicy(), ReviewRefusal.SELF_REVIEW),
        (view(), HASH, "requester", TenantPolicy(self_review=True), None),
        # The hash first: a requester quoting another plan is told the plan differs, not who they are.
        (view(), "0" * 64, "requester", TenantPolicy(), ReviewRefusal.HASH_MISMATCH),
    ],
)
def test_who_may_decide_which_plan(
    review: ReviewView, quoted: str, reviewer: str, policy: TenantPolicy, expected: ReviewRefusal | None
) -> None:
    assert review_refusal(review, quoted_hash=quoted, reviewer=reviewer, policy=policy, now=AT) is expected


def test_a_review_past_its_deadline_takes_no_decision() -> None:
    late = AT + timedelta(hours=1)

    refusal = review_refusal(view(), quoted_hash=HASH, reviewer="reviewer", policy=TenantPolicy(), now=late)

    assert refusal is ReviewRefusal.EXPIRED


def reviewed_run(*more: RunEvent) -> list[RunEvent]:
    created = run_created().model_copy(update={"review": True})
    return [created, PlanningStarted(at=AT, round=1), PlanAccepted(at=AT, round=1, plan=PLAN), *more]


def requested(round_number: int = 1) -> PlanReviewRequested:
    return PlanReviewRequested(
        at=AT,
        round=round_number,
        plan_hash=HASH,
        nodes=("case", "policy"),
        expires_at=AT + timedelta(hours=1),
    )


def test_a_run_waits_while_its_plan_is_reviewed_and_runs_once_approved() -> None:
    waiting = fold(reviewed_run(requested()))
    approved = fold(
        reviewed_run(
            requested(), PlanReviewed(at=AT, round=1, plan_hash=HASH, verdict="approved", by="person:t/r")
        )
    )

    assert (waiting.status, waiting.review_round) == (RunStatus.WAITING, 1)
    assert (approved.status, approved.review_round) == (RunStatus.RUNNING, None)
    assert approved.reviewed_calls == {call_signature(node) for node in Plan.parse(PLAN).nodes}


def test_a_rejected_review_covers_nothing() -> None:
    rejected = fold(
        reviewed_run(requested(), PlanReviewed(at=AT, round=1, plan_hash=HASH, verdict="rejected", by="p"))
    )

    assert (rejected.status, rejected.review_round, rejected.reviewed_calls) == (
        RunStatus.WAITING,
        None,
        frozenset(),
    )


@pytest.mark.parametrize(
    "events",
    [
        # A run created without review cannot be made to wait for one.
        [
            run_created(),
            PlanningStarted(at=AT, round=1),
            PlanAccepted(at=AT, round=1, plan=PLAN),
            requested(),
        ],
        # A review of another round than the current one.
        reviewed_run(requested(round_number=2)),
        # Asked twice.
        reviewed_run(requested(), requested()),
        # Decided without being asked.
        reviewed_run(PlanReviewed(at=AT, round=1, plan_hash=HASH, verdict="approved", by="p")),
    ],
)
def test_the_reducer_refuses_a_review_out_of_turn(events: list[RunEvent]) -> None:
    with pytest.raises(EventRefused):
        fold(events)


def test_a_reviewed_round_waits_until_a_yes_covers_its_calls_and_an_unreviewed_run_never_does() -> None:
    unreviewed_run = fold(
        [run_created(), PlanningStarted(at=AT, round=1), PlanAccepted(at=AT, round=1, plan=PLAN)]
    )
    accepted = fold(reviewed_run())
    waiting = fold(reviewed_run(requested()))
    approved = fold(
        reviewed_run(requested(), PlanReviewed(at=AT, round=1, plan_hash=HASH, verdict="approved", by="p"))
    )

    assert unreviewed_run.awaits_review is False
    assert (accepted.awaits_review, waiting.awaits_review, approved.awaits_review) == (True, True, False)

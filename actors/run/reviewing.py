"""The plan-review gate: a round of a reviewed run dispatches nothing until a person approved its plan.

The gate asks for the round's review (a row of ``plan_reviews`` and ``PlanReviewRequested``: the run is
``waiting``), then parks the run until a person decides it or its deadline passes (``review_wait_s``); woken,
the run comes back here and reads what became of it. The decision itself is ``dag.review``'s and the
store's; this records what became of it before the round acts on it.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from actors.run.recorder import RunRecorder, now
from actors.run.waiting import decided_or_park
from actors.store.reviews import Review, ReviewStore
from dag.events import PlanReviewed, PlanReviewRequested, RunFinished
from dag.review import ReviewState, plan_hash, unreviewed
from dag.states import RunStatus, StopReason


class ReviewGate:
    def __init__(self, store: ReviewStore, *, actor: str) -> None:
        self._store = store
        self._actor = actor
        """Who expires a review nobody decided: ``supervisor:NAME``."""

    async def hold(self, run: RunRecorder, cancel: asyncio.Event, handover: asyncio.Event) -> None:
        """Ask for the current round's review if it was not yet, and park the run until it is decided. The run
        is running again once approved, and finished otherwise (rejected, expired, cancelled)."""
        state = run.state
        round_number = state.round
        plan = state.plans[round_number - 1]
        quoted = plan_hash(plan.to_json())  # the recorded plan's: what a yes must be to
        if state.review_round is None:
            asked = await self._store.request(
                run_id=state.run_id,
                round_number=round_number,
                tenant_id=state.principal.tenant_id,
                subject=state.principal.subject,
                plan=plan.to_json(),
                plan_hash=quoted,
                nodes=unreviewed(plan, state.reviewed_calls),
                expires_at=now() + timedelta(seconds=state.budgets.review_wait_s),
                actor=self._actor,
            )
            await run.record(
                PlanReviewRequested(
                    at=now(),
                    round=round_number,
                    plan_hash=asked.plan_hash,
                    nodes=asked.nodes,
                    expires_at=asked.expires_at,
                )
            )
        review = await decided_or_park(
            run,
            lambda: self._store.get(state.run_id, round_number, quoted),
            awaiting=lambda row: row.state is ReviewState.AWAITING,
            expires_at=lambda row: row.expires_at,
            expire=lambda: self._store.decide(
                state.run_id, round_number, quoted, ReviewState.EXPIRED, actor=self._actor
            ),
            cancel=cancel,
            handover=handover,
            wait=f"review:{round_number}",
        )
        await self._record(run, review, cancelled=cancel.is_set())

    async def _record(self, run: RunRecorder, review: Review, *, cancelled: bool) -> None:
        decided = PlanReviewed(
            at=now(),
            round=review.round,
            plan_hash=review.plan_hash,
            verdict=review.state.value,
            by=review.decided_by or self._actor,
        )
        if review.state is ReviewState.APPROVED:
            await run.record(decided)
            return
        if review.state is ReviewState.REJECTED:
            status, reason = RunStatus.STOPPED, StopReason.PLAN_REJECTED
            detail = f"round {review.round}'s plan was rejected by {review.decided_by}" + (
                f": {review.note}" if review.note else ""
            )
        elif cancelled:
            status, reason = RunStatus.CANCELLED, StopReason.CANCELLED
            detail = "the run was cancelled while its plan waited for review"
        else:
            status, reason = RunStatus.STOPPED, StopReason.REVIEW_EXPIRED
            detail = f"round {review.round}'s plan was not reviewed by {review.expires_at.isoformat()}"
        await run.record(decided, RunFinished(at=now(), status=status, stop_reason=reason, detail=detail))

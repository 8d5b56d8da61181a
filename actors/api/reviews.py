"""Plan review over HTTP: a run's plans as they were put to a person, and a person's approval or rejection.

A decision quotes the SHA-256 of the plan's canonical JSON (``plan_hash``): a yes to another plan than the one
waiting is refused, never applied. Deciding needs the scope ``runs:review``; the run's own principal decides
only where its tenant's policy allows it (``self_review``; by default never). Each decision is one conditional
update of the review's row (``actors.store.reviews``); the supervisor that drives the run reads it from there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, NoReturn

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from actors.api._problem import Problem, problem_responses
from actors.api.views import iso
from actors.run.approvals import Person, ReviewRefused, Verdict, decide_plan
from actors.store.reviews import Review, ReviewStore
from dag.policy import Principal, TenantPolicy
from dag.review import REVIEW_SCOPE, ReviewRefusal

Round = Annotated[int, Path(ge=1, le=10_000, description="The round whose plan is decided")]

_REFUSALS: Mapping[ReviewRefusal, tuple[int, str]] = {
    ReviewRefusal.NOT_FOUND: (404, "this round of the run has no plan put to review"),
    ReviewRefusal.HASH_MISMATCH: (
        409,
        "plan_hash is not the hash of the plan waiting for review: a decision applies to that exact plan only",
    ),
    ReviewRefusal.ALREADY_DECIDED: (409, "the plan was already reviewed"),
    ReviewRefusal.EXPIRED: (409, "the plan's review expired before it was decided"),
    ReviewRefusal.SELF_REVIEW: (403, "the run's own principal may not review its plan (its tenant's policy)"),
}


class PlanDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="The SHA-256 of the plan, as listed")
    note: str | None = Field(default=None, max_length=2000)


def review_view(review: Review) -> dict[str, Any]:
    """One review as the API shows it."""
    return {
        "round": review.round,
        "state": review.state.value,
        "plan": review.plan,
        "plan_hash": review.plan_hash,
        "nodes": list(review.nodes),
        "requested_by": f"{review.tenant_id}/{review.subject}",
        "expires_at": iso(review.expires_at),
        "decided_by": review.decided_by,
        "decided_at": iso(review.decided_at),
        "note": review.note,
        "created_at": iso(review.created_at),
    }


def reviews_router(
    *,
    reviews: Callable[[], ReviewStore],
    authenticated: Callable[..., Awaitable[Principal]],
    readable_run: Callable[[Principal, str], Awaitable[dict[str, Any]]],
    policy_of: Callable[[str], TenantPolicy],
) -> APIRouter:
    """The routes. ``readable_run`` is the API's tenant check (404 identical to an unknown run); ``policy_of``
    a tenant's policy (whether the run's own principal may review its plan)."""
    router = APIRouter()
    caller = Depends(authenticated)

    @router.get("/runs/{run_id}/reviews", responses=problem_responses(401, 404, 503))
    async def list_reviews(run_id: str, principal: Principal = caller) -> list[dict[str, Any]]:
        """The run's plans put to review, a round each: the plan, its hash, the nodes no earlier yes covered,
        its state, and who decided it when."""
        row = await readable_run(principal, run_id)
        return [review_view(review) for review in await reviews().of_run(str(row["run_id"]))]

    async def verdict(
        principal: Principal, run_id: str, round_number: int, body: PlanDecision, verdict: Verdict
    ) -> dict[str, Any]:
        if REVIEW_SCOPE not in principal.scopes:
            raise Problem(403, "scope-missing", f"reviewing a plan needs the scope {REVIEW_SCOPE!r}")
        run = str((await readable_run(principal, run_id))["run_id"])
        try:
            decided = await decide_plan(
                reviews(),
                run,
                round_number,
                verdict,
                quoted_hash=body.plan_hash,
                person=Person(principal.tenant_id, principal.subject),
                policy=policy_of(principal.tenant_id),
                note=body.note,
            )
        except ReviewRefused as refused:
            _refuse(refused.refusal)
        return review_view(decided)

    decisions = problem_responses(400, 401, 403, 404, 409, 422, 503)

    @router.post("/runs/{run_id}/reviews/{round_number}/approve", responses=decisions)
    async def approve_plan(
        run_id: str, round_number: Round, body: PlanDecision, principal: Principal = caller
    ) -> dict[str, Any]:
        """Approve the round's exact plan: its supervisor dispatches it."""
        return await verdict(principal, run_id, round_number, body, "approve")

    @router.post("/runs/{run_id}/reviews/{round_number}/reject", responses=decisions)
    async def reject_plan(
        run_id: str, round_number: Round, body: PlanDecision, principal: Principal = caller
    ) -> dict[str, Any]:
        """Reject the round's plan: nothing of it runs, and the run stops ``PLAN_REJECTED``."""
        return await verdict(principal, run_id, round_number, body, "reject")

    return router


def _refuse(refusal: ReviewRefusal) -> NoReturn:
    status, detail = _REFUSALS[refusal]
    raise Problem(status, refusal.value, detail)

"""Plan review over HTTP: a run's plans as they were put to a person, and a person's approval or rejection.

A decision quotes the SHA-256 of the plan's canonical JSON (``plan_hash``): a yes to another plan than the one
waiting is refused, never applied. Deciding needs the scope ``runs:review``; the run's own principal decides
only where its tenant's policy allows it (``self_review``; by default never). The decision is
``actors.run.approvals``' (``Decisions``), as for operations and questions; a refusal is its problem.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, Caller, ReadableRun
from actors.api.schemas import QuotedHash, ReviewView
from actors.api.views import review_view

Round = Annotated[int, Path(ge=1, le=10_000, description="The round whose plan is decided")]

router = APIRouter(tags=["reviews"])


class PlanDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plan_hash: QuotedHash = Field(description="The SHA-256 of the plan, as listed")
    note: str | None = Field(default=None, max_length=2000)


@router.get(
    "/runs/{run_id}/reviews", response_model=list[ReviewView], responses=problem_responses(401, 404, 503)
)
async def list_reviews(run: ReadableRun, api: Api) -> list[ReviewView]:
    """The run's plans put to review, a round each: the plan, its hash, the nodes no earlier yes covered, its
    state, and who decided it when."""
    return [review_view(review) for review in await api.reviews.of_run(str(run["run_id"]))]


DECIDED = problem_responses(400, 401, 403, 404, 409, 422, 503)


@router.post("/runs/{run_id}/reviews/{round_number}/approve", response_model=ReviewView, responses=DECIDED)
async def approve_plan(
    run_id: str, round_number: Round, body: PlanDecision, principal: Caller, api: Api
) -> ReviewView:
    """Approve the round's exact plan: its supervisor dispatches it."""
    decided = await api.decisions.decide_plan(
        principal, run_id, round_number, "approve", quoted_hash=body.plan_hash, note=body.note
    )
    return review_view(decided)


@router.post("/runs/{run_id}/reviews/{round_number}/reject", response_model=ReviewView, responses=DECIDED)
async def reject_plan(
    run_id: str, round_number: Round, body: PlanDecision, principal: Caller, api: Api
) -> ReviewView:
    """Reject the round's plan: nothing of it runs, and the run stops ``PLAN_REJECTED``."""
    decided = await api.decisions.decide_plan(
        principal, run_id, round_number, "reject", quoted_hash=body.plan_hash, note=body.note
    )
    return review_view(decided)

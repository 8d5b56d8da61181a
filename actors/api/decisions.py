"""What waits for people: ``GET /decisions``, one inbox of the decisions pending across the tenant's runs the
caller may read — operations awaiting approval or whose outcome is unknown, plans awaiting review, questions
awaiting an answer — soonest deadline first, each with what a person needs to decide it and where.

The inbox lists what the caller may read, not only what it may decide: each item says whether the caller may
(``decidable``: the kind's scope held, and not the run's own principal where its tenant's policy bars that).
A run's own view names the same items while it waits (``waiting_for``).
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, ApiState, Caller
from actors.api.pages import (
    DEFAULT_PAGE,
    CaseId,
    Cursor,
    Limit,
    ResourcePairs,
    pending_cursor,
    pending_key,
    resource_filter,
)
from actors.api.schemas import DecisionsPage, PendingItem
from actors.api.views import pending_view
from actors.run.approvals import DecisionKind
from actors.store.listing import RunFilter
from dag.policy import Principal
from dag.states import RunStatus

WAITING_FOR_LIMIT = 100
"""How many of a waiting run's decisions its view names; ``GET /decisions?run_id=`` pages through more."""

router = APIRouter(tags=["decisions"])

Kinds = Annotated[
    list[DecisionKind], Query(alias="kind", description="Only decisions of these kinds (repeatable).")
]
RunIds = Annotated[
    list[uuid.UUID],
    Query(
        alias="run_id",
        max_length=100,
        description="Only these runs' decisions and their child runs', to any depth (repeatable).",
    ),
]


@router.get(
    "/decisions",
    response_model=DecisionsPage,
    responses=problem_responses(401, 422, 503),
    summary="The inbox",
)
async def list_decisions(
    principal: Caller,
    api: Api,
    kind: Kinds = [],  # noqa: B006 - FastAPI copies a default list per request
    run_id: RunIds = [],  # noqa: B006
    resource: ResourcePairs = [],  # noqa: B006
    case_id: CaseId = None,
    limit: Limit = DEFAULT_PAGE,
    cursor: Cursor = None,
) -> DecisionsPage:
    """The decisions that wait for people in the runs the caller may read, soonest deadline first (those
    without one last), each with the route that decides it and whether the caller may. A run named in
    ``run_id`` brings its child runs' with it: what a sub-agent waits for, its parent waits for too."""
    runs = RunFilter(
        resource=resource_filter(resource, case_id),
        run_ids=[str(run) for run in run_id] if run_id else None,
        descendants=True,
    )
    found = await api.listing.pending(
        principal,
        runs,
        kinds=[chosen.value for chosen in kind] or [every.value for every in DecisionKind],
        after=pending_key(cursor),
        limit=limit + 1,
    )
    policy = api.policy_of(principal.tenant_id)
    page = found[:limit]
    return DecisionsPage(
        items=[pending_view(pending, principal, policy) for pending in page],
        next=pending_cursor(page[-1].position) if len(found) > limit else None,
    )


async def waiting_for(api: ApiState, principal: Principal, run: dict[str, object]) -> list[PendingItem]:
    """The decisions a waiting run waits for, as the caller is shown them: its own and its child runs', to any
    depth (a parent parked on a sub-agent waits for what the sub-agent waits for; each item names its run);
    none for a run that does not wait."""
    if run["status"] != RunStatus.WAITING:
        return []
    found = await api.listing.pending(
        principal,
        RunFilter(run_ids=[str(run["run_id"])], descendants=True),
        after=None,
        limit=WAITING_FOR_LIMIT,
    )
    policy = api.policy_of(principal.tenant_id)
    return [pending_view(pending, principal, policy) for pending in found]

"""The runs over HTTP: a run created, listed, read with its nodes and events, cancelled and continued.

Creation and continuation go to a supervisor (the next in turn), within the replica's submission line; every
read is the run store's, and a run exists only for keys of its tenant holding at least the scopes it was
created with (``dependencies.readable_run``). A run's answer names, while it waits, what it waits for.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from actors.api._outcomes import ask, database_unavailable, raise_for_submission
from actors.api._problem import Problem, problem_responses
from actors.api.decisions import waiting_for
from actors.api.dependencies import Api, ApiState, Caller, ReadableRun, RunHistory, run_not_found
from actors.api.pages import (
    DEFAULT_PAGE,
    CaseId,
    CreatedAfter,
    CreatedBefore,
    Cursor,
    Limit,
    ResourcePairs,
    resource_filter,
    run_cursor,
    run_key,
)
from actors.api.schemas import EventView, NodeView, RunCancelled, RunsPage, RunView
from actors.api.views import event_view, load_state, nodes_view, run_summary, run_view
from actors.observe.tracing import carrier
from actors.run.submission import (
    DEFAULT_GOAL,
    Cancellation,
    ContinueRequest,
    RunRequest,
    Submission,
    SubmitResult,
)
from actors.store.listing import RunFilter, RunKey
from actors.store.resilience import REQUEST_DEADLINE_S, DatabaseUnavailable, deadline
from actors.store.runs import MAX_SEQ
from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE
from dag.policy import Principal
from dag.questions import MAX_ANSWER_CHARS
from dag.run_resource import (
    IDENTIFIER_PATTERN,
    MAX_RESOURCE_KEY_LENGTH,
    MAX_RESOURCE_KEYS,
    MAX_RESOURCE_VALUE_LENGTH,
    RESOURCE_KEY_PATTERN,
)
from dag.states import RunStatus
from dag.storable import unfit_values

log = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 60
WAIT_GRACE_S = 2.0
"""How much longer than ``?wait=`` the API waits for the supervisor's answer before it stops waiting."""

router = APIRouter(tags=["runs"])

Identifier = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=IDENTIFIER_PATTERN)]
ResourceKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_RESOURCE_KEY_LENGTH, pattern=RESOURCE_KEY_PATTERN)
]
RunResource = Annotated[
    dict[ResourceKey, Annotated[str, StringConstraints(min_length=1, max_length=MAX_RESOURCE_VALUE_LENGTH)]],
    Field(
        max_length=MAX_RESOURCE_KEYS,
        description='What the run is about, e.g. `{"case_id": "C-102"}` or `{"root": "/srv/reports"}`: '
        "the keys the tools' run-bound inputs are bound to, each with a string value; none (`{}`, or absent) "
        "for a run whose tools bind nothing.",
        json_schema_extra={"additionalProperties": False},  # a key off the pattern is refused, not ignored
    ),
]
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
Wait = Annotated[
    float,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Seconds to wait, before answering, for the run to end or to wait for a person.",
    ),
]
EventCursor = Annotated[int, Query(ge=0, le=MAX_SEQ)]
Statuses = Annotated[
    list[RunStatus],
    Query(alias="status", description="Only runs in these states (repeatable): `waiting`, ..."),
]


class RunCreate(BaseModel):
    """``POST /runs``. Tenant, subject and scopes are deliberately absent: they come from the API key."""

    model_config = ConfigDict(extra="forbid")

    resource: RunResource | None = None
    case_id: Identifier | None = Field(
        default=None, description='A shorthand: `{"case_id": X}` is `{"resource": {"case_id": X}}`.'
    )
    goal: str = Field(default=DEFAULT_GOAL, min_length=1, max_length=2000)
    planner: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The planner: `outputs` (the default with a `plan`), `openai`, or the toolsets' own (the "
        "default without one; caseops: `conformance`).",
    )
    plan: dict[str, Any] | None = None
    budgets: BudgetRequest | None = None
    model: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The model the planner plans with (`openai`): the deployment's `RAYDAG_MODEL` or one the "
        "tenant's policy lists (`models` in `RAYDAG_TENANT_POLICY`); another is 422 `model-not-allowed`.",
    )
    stage: str = Field(
        default=INVESTIGATE,
        pattern=r"^[a-z][a-z0-9_]{0,39}$",
        description="The run's stage: the tools declared for it are the run's (`investigate` reads; a stage "
        "that acts, caseops' `act`, offers writes, each approved as an operation: docs/EFFECTS.md).",
    )
    review: Literal["plan"] | None = Field(
        default=None,
        description="`plan`: each round's plan waits for a person's yes (`/runs/{id}/reviews`) before anything "
        "of it runs (docs/PEOPLE.md). A tenant's policy may require it.",
    )

    @model_validator(mode="after")
    def _one_resource(self) -> RunCreate:
        if (
            self.resource is not None
            and self.case_id is not None
            and self.resource.get("case_id") != self.case_id
        ):
            raise ValueError("case_id and resource.case_id disagree: give one, or the same value in both")
        return self

    @property
    def run_resource(self) -> dict[str, str]:
        """The run's resource, the shorthand expanded; none at all for a run whose tools bind nothing (whether
        its tools need one is admission's to say: ``resource-mismatch``)."""
        if self.resource is not None:
            return dict(self.resource)
        return {"case_id": str(self.case_id)} if self.case_id is not None else {}

    def unfit(self) -> list[dict[str, str]]:
        """Where the body holds what PostgreSQL cannot store or JSON cannot carry (NUL, lone surrogates,
        non-finite numbers); the typed fields refuse those themselves."""
        free = {
            "goal": self.goal,
            "planner": self.planner,
            "plan": self.plan,
            "resource": self.resource,
            "model": self.model,
        }
        return [{"location": f"/body{pointer}", "message": reason} for pointer, reason in unfit_values(free)]


class RunContinue(BaseModel):
    """``POST /runs/{id}/continue``. The tenant, principal, resource, stage, planner and tool definitions are
    the earlier run's: only these may be new."""

    model_config = ConfigDict(extra="forbid")

    goal: str | None = Field(
        default=None, min_length=1, max_length=2000, description="A new goal; by default the earlier run's."
    )
    answer: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ANSWER_CHARS,
        description="What the planner is told, with who said it, as a person's answer to what the run stopped "
        "on; never authority.",
    )
    budgets: BudgetRequest | None = Field(
        default=None,
        description="Applied over the earlier run's budgets, each within the server's limit: more room than "
        "the earlier run had is allowed.",
    )

    def unfit(self) -> list[dict[str, str]]:
        free = {"goal": self.goal, "answer": self.answer}
        return [{"location": f"/body{pointer}", "message": reason} for pointer, reason in unfit_values(free)]


def _refuse_unfit(unfit: list[dict[str, str]]) -> None:
    if unfit:
        raise Problem(422, "invalid-request", "the request holds values that cannot be stored", errors=unfit)


async def run_answer(api: ApiState, principal: Principal, run: dict[str, Any]) -> RunView:
    """The run as the caller is shown it, with the decisions it waits for while it waits."""
    return run_view(run, await waiting_for(api, principal, run))


ACCEPTED: dict[int | str, dict[str, Any]] = {
    201: {"description": "A new run; Location names it."},
    200: {"model": RunView, "description": "A replay: the run this request already created."},
}


@router.post(
    "/runs",
    status_code=201,
    response_model=RunView,
    responses={**ACCEPTED, **problem_responses(400, 401, 404, 409, 413, 422, 503)},
)
async def create_run(
    body: RunCreate,
    principal: Caller,
    api: Api,
    response: Response,
    idempotency_key: IdempotencyKey = None,
    wait: Wait = 0,
) -> RunView:
    """Start a run: 201 with the run (200 for a replay of the same ``Idempotency-Key`` and body), once it has
    ended or waits for a person, or ``wait`` seconds passed."""
    _refuse_unfit(body.unfit())
    # FastAPI's server span of this request is current here: the run continues its trace.
    request = RunRequest(
        principal=principal,
        resource=body.run_resource,
        goal=body.goal,
        planner=body.planner,
        plan=body.plan,
        budgets=body.budgets,
        idempotency_key=idempotency_key,
        trace=carrier(),
        stage=body.stage,
        review=body.review == "plan",
        model=body.model,
    )
    supervisor, line = api.supervisors.next()
    submitted: SubmitResult = await ask(lambda: supervisor.submit.remote(request), line=line)
    span = trace.get_current_span()
    if submitted.run_id is not None:
        span.set_attribute("raydag.run_id", submitted.run_id)
    span.set_attribute("raydag.submission", submitted.outcome.value)
    conflicting_run_visible = (
        submitted.outcome is Submission.IDEMPOTENCY_CONFLICT
        and submitted.run_id is not None
        and await api.store.run_row(principal, submitted.run_id) is not None
    )
    raise_for_submission(submitted, conflicting_run_visible=conflicting_run_visible)
    return await _accepted(api, principal, submitted, wait, supervisor, response)


async def _accepted(
    api: ApiState,
    principal: Principal,
    submitted: SubmitResult,
    wait: float,
    supervisor: Any,
    response: Response,
) -> RunView:
    """The run a request created (201) or replayed (200), once it has ended or waits for a person, or ``wait``
    seconds passed."""
    run_id = submitted.run_id
    assert run_id is not None
    if wait > 0:
        try:
            await ask(lambda: supervisor.wait.remote(run_id, wait, True), within_s=wait + WAIT_GRACE_S)
        except Problem:
            log.warning("the supervisor stopped answering while run %s was awaited", run_id)
        with deadline(REQUEST_DEADLINE_S):  # the wait was legitimate: the read gets a budget of its own
            view = await _accepted_view(api, principal, run_id)
    else:
        view = await _accepted_view(api, principal, run_id)
    response.status_code = 201 if submitted.outcome is Submission.CREATED else 200
    response.headers["Location"] = f"/runs/{run_id}"
    return view


async def _accepted_view(api: ApiState, principal: Principal, run_id: str) -> RunView:
    """The run this request created or replayed: a 503 now says so, and where to read it later."""
    try:
        row = await api.store.run_row(principal, run_id)
        if row is None:  # a replay by a key of the tenant that lacks scopes the run was created with
            raise run_not_found()
        return await run_answer(api, principal, row)
    except DatabaseUnavailable:
        raise database_unavailable(
            "the run was accepted, but the run store cannot be reached to show it; GET its Location later",
            run_id=run_id,
        ) from None


@router.get("/runs", response_model=RunsPage, responses=problem_responses(401, 422, 503))
async def list_runs(
    principal: Caller,
    api: Api,
    status: Statuses = [],  # noqa: B006 - FastAPI copies a default list per request
    resource: ResourcePairs = [],  # noqa: B006
    case_id: CaseId = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    limit: Limit = DEFAULT_PAGE,
    cursor: Cursor = None,
) -> RunsPage:
    """The runs of the caller's tenant it may read, newest first, without their plans and results."""
    runs = RunFilter(
        statuses=[chosen.value for chosen in status],
        resource=resource_filter(resource, case_id),
        created_after=created_after,
        created_before=created_before,
    )
    rows = await api.listing.runs(principal, runs, after=run_key(cursor), limit=limit + 1)
    page = rows[:limit]
    last = RunKey(page[-1]["created_at"], str(page[-1]["run_id"])) if len(rows) > limit else None
    return RunsPage(items=[run_summary(row) for row in page], next=run_cursor(last) if last else None)


@router.get("/runs/{run_id}", response_model=RunView, responses=problem_responses(401, 404, 503))
async def get_run(run: ReadableRun, principal: Caller, api: Api) -> RunView:
    """The run, and while it waits, the decisions it waits for."""
    return await run_answer(api, principal, run)


@router.get(
    "/runs/{run_id}/nodes", response_model=list[NodeView], responses=problem_responses(401, 404, 410, 503)
)
async def get_nodes(run: RunHistory, api: Api) -> list[NodeView]:
    """Each node in plan order, ``for_each`` children after their parent, with its attempts."""
    run_id = str(run["run_id"])
    contracts = await api.supervisors.ask_any(lambda supervisor: supervisor.contracts.remote())
    return nodes_view(await load_state(api.store, run_id), contracts, await api.store.ledger(run_id))


@router.get(
    "/runs/{run_id}/events",
    response_model=list[EventView],
    responses=problem_responses(401, 404, 410, 422, 503),
)
async def get_events(run: RunHistory, api: Api, after: EventCursor = 0) -> list[EventView]:
    """The run's events in order; ``after`` resumes from a sequence number the client already has."""
    return [event_view(stored) for stored in await api.store.events(str(run["run_id"]), after=after)]


@router.post(
    "/runs/{run_id}/cancel", response_model=RunCancelled, responses=problem_responses(401, 404, 409, 503)
)
async def cancel_run(run: ReadableRun, principal: Caller, api: Api) -> RunCancelled:
    """Cancel a live run; cancelling a finished run changes nothing and says so."""
    run_id = str(run["run_id"])
    # Only the run's owner can stop its calls; if it is gone, another says the run is not its own.
    outcome: Cancellation = await api.supervisors.ask_any(
        lambda supervisor: supervisor.cancel.remote(run_id), first=run["owner"]
    )
    if outcome is Cancellation.NOT_OWNED:
        raise Problem(409, "run-not-owned", "the run is live but no supervisor drives it now; retry shortly")
    now = await api.store.run_row(principal, run_id)
    if now is None:
        raise run_not_found()
    view = await run_answer(api, principal, now)
    return RunCancelled.model_validate({**view.model_dump(), "cancel": outcome.value})


@router.post(
    "/runs/{run_id}/continue",
    status_code=201,
    response_model=RunView,
    responses={
        201: {"description": "The continuation, a new run; Location names it."},
        200: {
            "model": RunView,
            "description": "A replay: the continuation this same request already created.",
        },
        **problem_responses(400, 401, 404, 409, 410, 413, 422, 503),
    },
)
async def continue_run(
    run_id: str,
    principal: Caller,
    api: Api,
    response: Response,
    body: RunContinue | None = None,
    wait: Wait = 0,
) -> RunView:
    """Continue a run that stopped: a new run over the same tenant, principal and resource, linked both ways,
    that reuses every read that succeeded and takes its writes over by id (docs/PEOPLE.md)."""
    body = body if body is not None else RunContinue()
    _refuse_unfit(body.unfit())
    request = ContinueRequest(
        principal=principal,
        run_id=run_id,
        goal=body.goal,
        answer=body.answer,
        budgets=body.budgets,
        trace=carrier(),
    )
    supervisor, line = api.supervisors.next()
    submitted: SubmitResult = await ask(lambda: supervisor.continue_run.remote(request), line=line)
    raise_for_submission(submitted, conflicting_run_visible=True)
    return await _accepted(api, principal, submitted, wait, supervisor, response)

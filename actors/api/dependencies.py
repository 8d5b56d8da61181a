"""What the routes depend on, read from ``request.app.state``: the API's state (its stores, supervisors and
tenants' policies, opened by the app's lifespan), the caller (the principal its API key stands for), and the
run a route names, if the caller may read it.

Each is a FastAPI dependency, declared as a typed alias (``Api``, ``Caller``, ``ReadableRun``, ``RunHistory``)
for a route's parameters. The caller is known before the body is validated: no key, no hints about the body.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, cast

import asyncpg
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from actors.api._problem import Problem
from actors.api.supervisors import Supervisors
from actors.launch.settings import ApiKeyGrant
from actors.run.approvals import Decisions
from actors.store.listing import Listing
from actors.store.operations import OperationStore
from actors.store.questions import QuestionStore
from actors.store.reviews import ReviewStore
from actors.store.runs import RunStore
from actors.store.tool_questions import ToolQuestionStore
from dag.policy import Principal, TenantPolicy


@dataclass
class ApiState:
    """What the routes share: the API keys and tenants' policies from the configuration, and what the app's
    lifespan opens (``open``) — the stores over its pool and the supervisors' handles."""

    api_keys: Mapping[str, ApiKeyGrant]
    declared: frozenset[str]
    """The scopes the toolsets served declare: a key that lists none has them all."""
    policy_of: Callable[[str], TenantPolicy]
    store: RunStore = field(init=False)
    operations: OperationStore = field(init=False)
    reviews: ReviewStore = field(init=False)
    questions: QuestionStore = field(init=False)
    tool_questions: ToolQuestionStore = field(init=False)
    listing: Listing = field(init=False)
    decisions: Decisions = field(init=False)
    supervisors: Supervisors = field(init=False)

    def open(self, pool: asyncpg.Pool, supervisors: Supervisors) -> None:
        self.store = RunStore(pool)
        self.operations = OperationStore(pool)
        self.reviews = ReviewStore(pool)
        self.questions = QuestionStore(pool)
        self.tool_questions = ToolQuestionStore(pool)
        self.listing = Listing(pool, line=self.store.line)
        self.decisions = Decisions(
            self.store, self.operations, self.reviews, self.questions, self.policy_of, self.tool_questions
        )
        self.supervisors = supervisors


def api_state(request: Request) -> ApiState:
    return cast(ApiState, request.app.state.api)


Api = Annotated[ApiState, Depends(api_state)]

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`.")
"""Declares the API key in the OpenAPI document (a bearer scheme) and reads it; ``authenticated`` checks it."""


async def authenticated(
    api: Api, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Principal:
    """Who is asking. ``async`` though it never awaits: FastAPI runs a plain ``def`` dependency in a worker
    thread, a hand-off that cost the replica about 5 % of its CPU under load for a comparison of a few
    strings."""
    if credentials is not None:
        presented = credentials.credentials.strip().encode()
        for known, grant in api.api_keys.items():
            if hmac.compare_digest(known.encode(), presented):
                return grant.principal(api.declared)
    raise Problem(
        401,
        "unauthorized",
        "a valid API key is required: Authorization: Bearer <key>",
        headers={"WWW-Authenticate": 'Bearer realm="raydag"'},
    )


Caller = Annotated[Principal, Depends(authenticated)]


def run_not_found() -> Problem:
    """The answer for a run the caller may not read: the same as for one that does not exist."""
    return Problem(404, "run-not-found", "no run with this id was found")


async def readable_run(run_id: str, principal: Caller, api: Api) -> dict[str, Any]:
    """The row of the run ``run_id`` if the caller may read it (its tenant, holding every scope the run was
    created with); 404 ``run-not-found`` otherwise, identical for an unknown run."""
    row = await api.store.run_row(principal, run_id)
    if row is None:
        raise run_not_found()
    return row


ReadableRun = Annotated[dict[str, Any], Depends(readable_run)]


async def run_history(run: ReadableRun) -> dict[str, Any]:
    """The readable run's row if its events are still kept; 410 ``history-pruned`` once retention removed
    them."""
    if run["pruned_at"] is not None:
        raise Problem(
            410,
            "history-pruned",
            f"the run's events were removed by retention on {run['pruned_at'].isoformat()}; "
            "its summary and result remain at /runs/{run_id}",
        )
    return run


RunHistory = Annotated[dict[str, Any], Depends(run_history)]

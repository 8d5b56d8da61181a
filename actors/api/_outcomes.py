"""What errors, the supervisor's answers (and its silence) mean over HTTP."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from ray.exceptions import RayActorError
from starlette.exceptions import HTTPException as StarletteHTTPException

from actors.api._problem import Problem, with_problem_schema
from actors.run.approvals import DecisionRefused
from actors.run.submission import DATABASE_RETRY_AFTER_S as DATABASE_RETRY_AFTER_S
from actors.run.submission import SUPERVISOR_RETRY_AFTER_S as SUPERVISOR_RETRY_AFTER_S
from actors.run.submission import SubmitResult
from actors.store.resilience import QUEUE_S, DatabaseBusy, DatabaseUnavailable, Line, remaining_s, within

log = logging.getLogger(__name__)


def database_unavailable(
    detail: str = "the run store cannot be reached; nothing was accepted, retry later",
    *,
    run_id: str | None = None,
) -> Problem:
    """503 ``database-unavailable``; with ``run_id`` for a run that was accepted but cannot be shown now."""
    headers = {"Retry-After": str(DATABASE_RETRY_AFTER_S)}
    if run_id is None:
        return Problem(503, "database-unavailable", detail, headers=headers)
    headers["Location"] = f"/runs/{run_id}"
    return Problem(503, "database-unavailable", detail, headers=headers, run_id=run_id)


def supervisor_unavailable() -> Problem:
    return Problem(
        503,
        "supervisor-unavailable",
        "the run supervisor did not answer in time (it may be restarting); retry: with the same "
        "Idempotency-Key a retried POST /runs returns the run if this request created one",
        headers={"Retry-After": str(SUPERVISOR_RETRY_AFTER_S)},
    )


UNPARSED_BODY = "There was an error parsing the body"
"""FastAPI's 400 detail for a JSON body its parser raised on other than with a decode error."""


def not_json(reason: str, *, position: int | None = None) -> Problem:
    """400 ``invalid-json``: the body is not JSON at all; ``position`` is the character offset of the fault."""
    detail = f"the body is not valid JSON: {reason}"
    if position is None:
        return Problem(400, "invalid-json", detail)
    return Problem(400, "invalid-json", f"{detail} at character {position}", position=position)


class SupervisorSilent(Exception):
    """The supervisor left a submission unanswered: those in line for it leave at once."""


class SupervisorBusy(SupervisorSilent):
    """The supervisor answers, but this replica's submissions in flight to it stayed at the limit."""


SUBMISSIONS_AT_ONCE = 8
"""Submissions one API replica has in flight to the supervisor; more wait their turn (``submissions``)."""


def submissions() -> Line:
    """The line for a replica's submissions: a burst of POST /runs waits its turn at the supervisor (up to
    ``QUEUE_S``, not counted in the request's deadline) instead of asking it all at once. The supervisor
    answers a submission within the deadline while it is not also taking a hundred others; under load the
    queue forms here, where waiting is cheap, rather than as deadlines missed there (each a 503 that a client
    retries at once, and a run that may have been created all the same)."""
    return Line(
        SUBMISSIONS_AT_ONCE,
        resource="the supervisor",
        slot="submission slot",
        unavailable=SupervisorSilent,
        busy=SupervisorBusy,
    )


async def ask(
    call: Callable[[], Awaitable[Any]], *, within_s: float | None = None, line: Line | None = None
) -> Any:
    """The supervisor's answer to ``call`` (a ``handle.method.remote(...)``), by ``within_s`` or what is left
    of the request's deadline; 503 ``supervisor-unavailable`` if its actor is dead, restarting or silent.
    With a ``line``, ``call`` first waits its turn there, and the deadline starts once it has it."""
    if line is None:
        return await _answer(call, within_s)
    try:
        async with line.turn("a submission"):
            try:
                answer = await _answer(call, within_s)
            except Problem:
                line.unreachable()
                raise
            line.answered()
            return answer
    except SupervisorBusy as exc:
        detail = f"the supervisor's submissions stayed at {SUBMISSIONS_AT_ONCE} for {QUEUE_S:g}s; nothing was accepted"
        raise Problem(
            503, "supervisor-busy", detail, headers={"Retry-After": str(SUPERVISOR_RETRY_AFTER_S)}
        ) from exc
    except SupervisorSilent as exc:
        raise supervisor_unavailable() from exc


async def _answer(call: Callable[[], Awaitable[Any]], within_s: float | None) -> Any:
    try:
        return await within(call, remaining_s() if within_s is None else within_s)
    except (RayActorError, TimeoutError) as exc:
        raise supervisor_unavailable() from exc


def raise_for_submission(submitted: SubmitResult, *, conflicting_run_visible: bool) -> None:
    """Nothing for a created or replayed run; the problem that explains any other outcome (its status, type
    and detail are the submission's ``refusal()``, the same on every surface).

    ``conflicting_run_visible``: whether the requester may read the run an idempotency conflict names (only
    then does the 409 name it).
    """
    refusal = submitted.refusal()
    if refusal is None:
        return
    fields = dict(refusal.fields)
    if not conflicting_run_visible:
        fields.pop("run_id", None)
    headers = {"Retry-After": str(refusal.retry_after_s)} if refusal.retry_after_s is not None else None
    raise Problem(refusal.status, refusal.problem, refusal.detail, headers=headers, **fields)


def install_problem_handlers(app: FastAPI) -> None:
    """Make every error ``app`` answers a problem, and declare the ``Problem`` schema in its OpenAPI document."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = with_problem_schema(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(Problem)
    async def on_problem(request: Request, problem: Problem) -> Response:
        return problem.response(request.url.path)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> Response:
        unparsed = next((error for error in exc.errors() if error["type"] == "json_invalid"), None)
        if unparsed is not None:  # FastAPI's location is ("body", character offset): not a JSON pointer
            return not_json(unparsed["ctx"]["error"], position=unparsed["loc"][1]).response(request.url.path)
        # Locations and messages only: the rejected values (NaN, NUL, anything) are never echoed.
        errors = [
            {"location": "/" + "/".join(str(part) for part in error["loc"]), "message": error["msg"]}
            for error in exc.errors()[:20]
        ]
        problem = Problem(
            422, "invalid-request", "the request does not have the expected shape", errors=errors
        )
        return problem.response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 400 and exc.detail == UNPARSED_BODY:  # e.g. an integer of 5,000 digits
            return not_json("it cannot be read as JSON").response(request.url.path)
        problem = Problem(exc.status_code, "http-error", str(exc.detail), headers=dict(exc.headers or {}))
        return problem.response(request.url.path)

    @app.exception_handler(DecisionRefused)
    async def on_refused(request: Request, refused: DecisionRefused) -> Response:
        return Problem(refused.status, refused.code, refused.detail).response(request.url.path)

    @app.exception_handler(DatabaseUnavailable)
    async def on_database_down(request: Request, exc: DatabaseUnavailable) -> Response:
        if isinstance(exc, DatabaseBusy):
            busy = f"every connection to the run store stayed in use for {QUEUE_S:g}s; nothing was accepted"
            return database_unavailable(busy).response(request.url.path)
        return database_unavailable().response(request.url.path)

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = Problem(500, "internal-error", "the server failed; nothing about your request was lost")
        return problem.response(request.url.path)

"""A planner's questions over HTTP: what a run's planner asked a person, and a person's answer.

Answering needs the scope ``runs:answer``. The answer reaches the planner as an observation with its author,
never as authority: a tenant, scope, resource or budget written in it changes nothing. Each answer is one
conditional update of the question's row (``actors.store.questions``); the run's supervisor reads it there.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from actors.api._problem import Problem, problem_responses
from actors.api.views import iso
from actors.run.approvals import AnswerRefused, Person, answer_question
from actors.store.questions import Question, QuestionStore
from dag.policy import Principal
from dag.questions import ANSWER_SCOPE, MAX_ANSWER_CHARS, AnswerRefusal
from dag.storable import unfit_values

Number = Annotated[int, Path(ge=1, le=1_000, description="The question's number in the run")]

_REFUSALS: Mapping[AnswerRefusal, tuple[int, str]] = {
    AnswerRefusal.NOT_FOUND: (404, "the run's planner asked no question of that number"),
    AnswerRefusal.ALREADY_ANSWERED: (409, "the question was already answered"),
    AnswerRefusal.EXPIRED: (409, "the question's deadline passed before it was answered"),
}


class AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS, description="What the planner is told")


def question_view(question: Question) -> dict[str, Any]:
    """One question as the API shows it."""
    return {
        "number": question.number,
        "round": question.round,
        "state": question.state.value,
        "question": question.text,
        "asked_for": f"{question.tenant_id}/{question.subject}",
        "expires_at": iso(question.expires_at),
        "answer": question.answer,
        "answered_by": question.answered_by,
        "answered_at": iso(question.answered_at),
        "created_at": iso(question.created_at),
    }


def questions_router(
    *,
    questions: Callable[[], QuestionStore],
    authenticated: Callable[..., Awaitable[Principal]],
    readable_run: Callable[[Principal, str], Awaitable[dict[str, Any]]],
) -> APIRouter:
    """The routes. ``readable_run`` is the API's tenant check (404 identical to an unknown run)."""
    router = APIRouter()
    caller = Depends(authenticated)

    @router.get("/runs/{run_id}/questions", responses=problem_responses(401, 404, 503))
    async def list_questions(run_id: str, principal: Principal = caller) -> list[dict[str, Any]]:
        """What the run's planner asked, in order: each question, its state, and its answer and author."""
        row = await readable_run(principal, run_id)
        return [question_view(question) for question in await questions().of_run(str(row["run_id"]))]

    @router.post(
        "/runs/{run_id}/questions/{number}/answer",
        responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
    )
    async def answer(
        run_id: str, number: Number, body: AnswerBody, principal: Principal = caller
    ) -> dict[str, Any]:
        """Answer the planner's question: it plans again, shown the answer and who gave it."""
        if ANSWER_SCOPE not in principal.scopes:
            raise Problem(403, "scope-missing", f"answering a planner needs the scope {ANSWER_SCOPE!r}")
        unfit = [
            {"location": f"/body/answer{pointer}", "message": reason}
            for pointer, reason in unfit_values(body.answer)
        ]
        if unfit:
            raise Problem(
                422, "invalid-request", "the request holds values that cannot be stored", errors=unfit
            )
        run = str((await readable_run(principal, run_id))["run_id"])
        try:
            answered = await answer_question(
                questions(), run, number, body.answer, person=Person(principal.tenant_id, principal.subject)
            )
        except AnswerRefused as refused:
            status, detail = _REFUSALS[refused.refusal]
            raise Problem(status, refused.refusal.value, detail) from None
        return question_view(answered)

    return router

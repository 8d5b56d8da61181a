"""A planner's questions over HTTP: what a run's planner asked a person, and a person's answer.

Answering needs the scope ``runs:answer``. The answer reaches the planner as an observation with its author,
never as authority: a tenant, scope, resource or budget written in it changes nothing. The answer is taken by
``actors.run.approvals``' ``Decisions``, as operations and plans are decided; a refusal is its problem.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, Caller, ReadableRun
from actors.api.schemas import QuestionView
from actors.api.views import question_view
from dag.questions import MAX_ANSWER_CHARS
from dag.storable import unfit_values

Number = Annotated[int, Path(ge=1, le=1_000, description="The question's number in the run")]

router = APIRouter(tags=["questions"])


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    answer: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS, description="What the planner is told")

    @field_validator("answer")
    @classmethod
    def _storable(cls, answer: str) -> str:
        """An answer is recorded: a NUL or a lone surrogate cannot be (a 422, as any unfit body)."""
        for _, reason in unfit_values(answer):
            raise ValueError(reason)
        return answer


@router.get(
    "/runs/{run_id}/questions", response_model=list[QuestionView], responses=problem_responses(401, 404, 503)
)
async def list_questions(run: ReadableRun, api: Api) -> list[QuestionView]:
    """What the run's planner asked, in order: each question, its state, and its answer and author."""
    return [question_view(question) for question in await api.questions.of_run(str(run["run_id"]))]


@router.post(
    "/runs/{run_id}/questions/{number}/answer",
    response_model=QuestionView,
    responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
)
async def answer(run_id: str, number: Number, body: Answer, principal: Caller, api: Api) -> QuestionView:
    """Answer the planner's question: it plans again, shown the answer and who gave it."""
    return question_view(await api.decisions.answer(principal, run_id, number, body.answer))

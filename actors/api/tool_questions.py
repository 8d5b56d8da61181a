"""Tools' questions over HTTP: what a tool's server asked a person mid-call, and a person's answer.

A tool that runs as an MCP task may ask for input (a form elicitation); the run records the question and its
inbox lists it. Answering needs the scope ``runs:answer``, as a planner's question does. An answer's
``content`` must fit the schema the tool asked for (422 otherwise); it is sent to the tool as its input, never
as authority. Declining tells the tool the person would not answer. A decision is taken by
``actors.run.approvals``' ``Decisions``, as every decision is; a refusal is its problem.
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, Caller, ReadableRun
from actors.api.schemas import ToolQuestionView
from actors.api.views import tool_question_view
from dag.storable import unfit_values

MAX_CONTENT_BYTES = 16_384

router = APIRouter(tags=["tool questions"])


class ToolAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: dict[str, Any] = Field(
        description="The answer: an object that fits the question's `requested_schema` (checked against it)."
    )

    @field_validator("content")
    @classmethod
    def _storable(cls, content: dict[str, Any]) -> dict[str, Any]:
        """An answer is recorded and sent: a NUL, a lone surrogate or an oversized one cannot be (a 422)."""
        for _, reason in unfit_values(content):
            raise ValueError(reason)
        if len(repr(content)) > MAX_CONTENT_BYTES:
            raise ValueError(f"an answer is at most {MAX_CONTENT_BYTES:,} characters")
        return content


@router.get(
    "/runs/{run_id}/tool-questions",
    response_model=list[ToolQuestionView],
    responses=problem_responses(401, 404, 503),
)
async def list_tool_questions(run: ReadableRun, api: Api) -> list[ToolQuestionView]:
    """What the run's tools asked people, in order: each question, its state, and its answer and author."""
    questions = await api.tool_questions.of_run(str(run["run_id"]))
    return [tool_question_view(question) for question in questions]


@router.post(
    "/runs/{run_id}/tool-questions/{question_id}/answer",
    response_model=ToolQuestionView,
    responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
)
async def answer_tool_question(
    run_id: str, question_id: uuid.UUID, body: ToolAnswer, principal: Caller, api: Api
) -> ToolQuestionView:
    """Answer a tool's question: the content is sent to the tool, and its call goes on."""
    decided = await api.decisions.answer_tool(
        principal, run_id, str(question_id), accept=True, content=body.content
    )
    return tool_question_view(decided)


@router.post(
    "/runs/{run_id}/tool-questions/{question_id}/decline",
    response_model=ToolQuestionView,
    responses=problem_responses(400, 401, 403, 404, 409, 422, 503),
)
async def decline_tool_question(
    run_id: str, question_id: uuid.UUID, principal: Caller, api: Api
) -> ToolQuestionView:
    """Decline a tool's question: the tool is told the person would not answer, and decides what follows."""
    decided = await api.decisions.answer_tool(principal, run_id, str(question_id), accept=False)
    return tool_question_view(decided)

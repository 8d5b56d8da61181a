"""A tool's question, as pure logic: which schemas are forms a person can fill in, which answers fit them,
when an answer is refused, and what the server is sent for each way a question ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dag.tool_questions import (
    ToolAnswerRefusal,
    ToolQuestionState,
    answer_refusal,
    content_problem,
    form_problem,
    reply_of,
)

RESEARCH = {
    "type": "object",
    "properties": {
        "interpretation": {
            "type": "string",
            "oneOf": [{"const": "technical"}, {"const": "historical"}],
        },
        "depth": {"type": "integer", "minimum": 1, "maximum": 5},
        "urgent": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["interpretation"],
}
NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def test_a_flat_object_of_primitives_is_a_form() -> None:
    assert form_problem(RESEARCH) is None


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "string"}, "not an object of properties"),
        ({"type": "object"}, "not an object of properties"),
        ({"type": "object", "properties": {"x": {"type": "object"}}}, "'x' is of type 'object'"),
        ({"type": "object", "properties": {"x": True}}, "'x' is not a schema"),
        ({"type": "object", "properties": {"x": {"type": "array", "items": {}}}}, "other than enumerated"),
        ({"type": "object", "properties": {"x": {"type": "string", "minLength": -1}}}, "invalid"),
    ],
)
def test_anything_else_is_no_form_and_says_why(schema: dict[str, Any], said: str) -> None:
    problem = form_problem(schema)
    assert problem is not None
    assert said in problem


def test_an_answer_is_checked_against_the_schema_the_tool_asked_for() -> None:
    assert content_problem(RESEARCH, {"interpretation": "historical", "depth": 3, "tags": ["a"]}) is None
    assert "interpretation" in (content_problem(RESEARCH, {"depth": 3}) or "")
    assert (content_problem(RESEARCH, {"interpretation": "astrological"}) or "").startswith("/interpretation")
    assert (content_problem(RESEARCH, {"interpretation": "technical", "depth": 9}) or "").startswith("/depth")


@pytest.mark.parametrize(
    ("state", "due_in_s", "refusal"),
    [
        (ToolQuestionState.AWAITING, 60, None),
        (ToolQuestionState.AWAITING, -1, ToolAnswerRefusal.EXPIRED),
        (ToolQuestionState.EXPIRED, 60, ToolAnswerRefusal.EXPIRED),
        (ToolQuestionState.WITHDRAWN, 60, ToolAnswerRefusal.WITHDRAWN),
        (ToolQuestionState.ANSWERED, 60, ToolAnswerRefusal.DECIDED),
        (ToolQuestionState.DECLINED, 60, ToolAnswerRefusal.DECIDED),
    ],
)
def test_only_a_question_still_awaiting_and_in_time_takes_an_answer(
    state: ToolQuestionState, due_in_s: int, refusal: ToolAnswerRefusal | None
) -> None:
    assert answer_refusal(state, NOW + timedelta(seconds=due_in_s), now=NOW) is refusal


def test_the_server_is_sent_the_answer_a_decline_or_cancel() -> None:
    assert reply_of(ToolQuestionState.ANSWERED, {"interpretation": "technical"}) == {
        "action": "accept",
        "content": {"interpretation": "technical"},
    }
    assert reply_of(ToolQuestionState.DECLINED, None) == {"action": "decline"}
    assert reply_of(ToolQuestionState.EXPIRED, None) == {"action": "cancel"}

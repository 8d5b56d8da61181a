"""A tool's question to a person: a tool server that asks for input mid-call (an MCP form elicitation, from a
task that turned ``input_required``) asks a person, through the run's inbox, never the model.

The question is the server's words and the schema of the answer it wants; a person answers it (content that
the schema validates) or declines it. The answer goes back to the server and the call goes on; it is never
authority: what the run may do next is decided by its policy as always. A question nobody decides by its
deadline, or whose run stops first, is answered ``cancel``; one the server stopped waiting for (it went on
without the answer) is withdrawn, and takes no answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from dag.schemas import JsonSchema, SchemaInvalid

MAX_SERVER_MESSAGE_CHARS = 2000
"""A server's message longer than this is cut: it is shown to a person, as the server's words."""
MAX_SCHEMA_BYTES = 16_384
"""A requested schema larger than this is no form a person fills in: the question is declined."""
PRIMITIVES = frozenset({"string", "number", "integer", "boolean"})
"""The types a property of a requested schema may have (MCP restricts a form to flat primitives; an array of
enumerated strings is the one other shape it allows)."""


class ToolQuestionState(StrEnum):
    AWAITING = "awaiting"
    ANSWERED = "answered"
    DECLINED = "declined"
    WITHDRAWN = "withdrawn"
    """The server went on without an answer (its own wait ended): nothing is sent."""
    EXPIRED = "expired"
    """Nobody decided it by its deadline, or its run stopped: the server is told ``cancel``."""


class ToolAnswerRefusal(StrEnum):
    """Why an answer to a tool's question was refused: each its own problem type."""

    NOT_FOUND = "tool-question-not-found"
    DECIDED = "tool-question-decided"
    EXPIRED = "tool-question-expired"
    WITHDRAWN = "tool-question-withdrawn"
    INVALID = "tool-answer-invalid"


def answer_refusal(
    state: ToolQuestionState, expires_at: datetime, *, now: datetime
) -> ToolAnswerRefusal | None:
    """Why a question in ``state``, due at ``expires_at``, takes no answer at ``now``; ``None`` if it does."""
    if state is ToolQuestionState.EXPIRED or (state is ToolQuestionState.AWAITING and now >= expires_at):
        return ToolAnswerRefusal.EXPIRED
    if state is ToolQuestionState.WITHDRAWN:
        return ToolAnswerRefusal.WITHDRAWN
    if state is not ToolQuestionState.AWAITING:
        return ToolAnswerRefusal.DECIDED
    return None


def form_problem(schema: Mapping[str, Any]) -> str | None:
    """Why ``schema`` is no form a person can fill in (``None`` if it is): an object of primitive properties
    (or arrays of enumerated strings), as MCP's elicitation allows, and a valid JSON Schema."""
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        return "the requested schema is not an object of properties"
    for name, prop in schema["properties"].items():
        if not isinstance(prop, dict):
            return f"property {name!r} is not a schema"
        kind = prop.get("type")
        if kind == "array":
            items = prop.get("items")
            if not isinstance(items, dict) or not ("enum" in items or "anyOf" in items or "oneOf" in items):
                return f"property {name!r} is an array of something other than enumerated strings"
        elif kind not in PRIMITIVES:
            return f"property {name!r} is of type {kind!r}, not a string, number, integer or boolean"
    try:
        JsonSchema.of(dict(schema))
    except SchemaInvalid as exc:
        return f"the requested schema is invalid: {str(exc)[:200]}"
    return None


def content_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """The first thing wrong with ``content`` as an answer to ``schema`` (``/pointer: message``), or ``None``."""
    return JsonSchema.of(dict(schema)).first_problem(dict(content))


def reply_of(state: ToolQuestionState, content: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the server is sent for a question that left ``awaiting`` in ``state`` (an elicitation's result)."""
    match state:
        case ToolQuestionState.ANSWERED:
            return {"action": "accept", "content": dict(content or {})}
        case ToolQuestionState.DECLINED:
            return {"action": "decline"}
        case _:
            return {"action": "cancel"}

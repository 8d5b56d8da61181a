"""The two wire APIs a model planner may speak: OpenAI's Responses API and Chat Completions.

Each turns one structured request (messages, a format name, a JSON Schema, a model) into one ``Completion``:
the text, a refusal if the model declined, and the token usage if the endpoint reported it. What to do with
it (validation, the one repair, charging) is the planner's, the same for both.

- ``responses``: strict structured output (``text.format`` of type ``json_schema``, ``strict: true``).
- ``chat``: what local OpenAI-compatible servers (llama.cpp's, llama-cpp-python's) offer. They answer 404 on
  ``/v1/responses`` and a strict ``json_schema`` response format with a 500, so the request asks for
  ``{"type": "json_object", "schema": S}`` (a server that understands ``schema`` constrains decoding to it)
  and states the schema in a system message too; the planner validates every answer either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from openai import AsyncOpenAI


class ModelApi(StrEnum):
    """Which API the model endpoint speaks (``RAYDAG_MODEL_API``)."""

    RESPONSES = "responses"
    CHAT = "chat"


@dataclass(frozen=True)
class Tokens:
    """What the endpoint said a call consumed."""

    input: int
    output: int


@dataclass(frozen=True)
class Completion:
    """One model answer, whichever API gave it."""

    text: str
    refusal: str | None
    tokens: Tokens | None
    """``None``: the endpoint reported no usage for this call."""


class StructuredApi(Protocol):
    """One structured request to a model endpoint."""

    async def complete(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any], model: str
    ) -> Completion: ...


SCHEMA_INSTRUCTIONS = (
    "Answer with one JSON object and nothing else: no prose, no code fence. It must match this JSON Schema "
    "exactly (every property present, no others):\n"
)
"""What a Chat Completions request adds as a system message: a server may not constrain decoding to a schema."""


def responses_request(
    messages: list[dict[str, str]],
    name: str,
    schema: dict[str, Any],
    model: str,
    max_output_tokens: int | None,
) -> dict[str, Any]:
    """A Responses API request for strict structured output (``store`` false)."""
    request: dict[str, Any] = {
        "model": model,
        "input": messages,
        "text": {"format": {"type": "json_schema", "name": name, "schema": schema, "strict": True}},
        "store": False,
    }
    if max_output_tokens is not None:
        request["max_output_tokens"] = max_output_tokens
    return request


def chat_request(
    messages: list[dict[str, str]], schema: dict[str, Any], model: str, max_tokens: int | None
) -> dict[str, Any]:
    """A Chat Completions request for one JSON object that fits ``schema``, stated in the prompt as well."""
    stated = {"role": "system", "content": SCHEMA_INSTRUCTIONS + json.dumps(schema, separators=(",", ":"))}
    request: dict[str, Any] = {
        "model": model,
        "messages": [*messages, stated],
        "response_format": {"type": "json_object", "schema": schema},
        "temperature": 0,
    }
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    return request


class ResponsesApi:
    """Strict structured output through ``POST /responses``."""

    def __init__(self, client: AsyncOpenAI, max_output_tokens: int | None) -> None:
        self._client = client
        self._max_output_tokens = max_output_tokens

    async def complete(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any], model: str
    ) -> Completion:
        response = await self._client.responses.create(
            **responses_request(messages, name, schema, model, self._max_output_tokens)
        )
        return Completion(response.output_text, response_refusal(response), response_tokens(response.usage))


class ChatCompletionsApi:
    """One JSON object through ``POST /chat/completions``."""

    def __init__(self, client: AsyncOpenAI, max_tokens: int | None) -> None:
        self._client = client
        self._max_tokens = max_tokens

    async def complete(
        self, messages: list[dict[str, str]], name: str, schema: dict[str, Any], model: str
    ) -> Completion:
        response: Any = await self._client.chat.completions.create(
            **chat_request(messages, schema, model, self._max_tokens)
        )
        message = response.choices[0].message if response.choices else None
        text = (message.content if message is not None else None) or ""
        refusal = getattr(message, "refusal", None)
        usage = response.usage
        tokens = (
            Tokens(usage.prompt_tokens or 0, usage.completion_tokens or 0)
            if usage is not None and (usage.prompt_tokens or usage.completion_tokens)
            else None
        )
        return Completion(text, str(refusal) if refusal else None, tokens)


def response_tokens(usage: Any) -> Tokens | None:
    """A Responses API ``usage`` as ``Tokens``; ``None`` when the endpoint left it out."""
    if usage is None:
        return None
    return Tokens(usage.input_tokens, usage.output_tokens)


def response_refusal(response: Any) -> str | None:
    """The refusal in a Responses API answer, if the model declined."""
    for item in response.output or []:
        for content in getattr(item, "content", None) or []:
            if getattr(content, "type", None) == "refusal":
                return str(content.refusal)
    return None


MESSAGE_OVERHEAD_TOKENS = 16
"""Tokens a chat template may add around each message (role markers, separators), charged on an estimate."""


def estimated_tokens(messages: list[dict[str, str]], schema: dict[str, Any], output: str) -> Tokens:
    """An upper bound on what a call whose usage went unreported consumed: one token per UTF-8 byte of what
    was sent (the messages and the schema) and of what came back. A byte-level tokenizer never makes more
    tokens than bytes, so a budget charged this way stops a run no later than the real count would."""
    sent = sum(len(message["content"].encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for message in messages)
    schema_bytes = len(json.dumps(schema, separators=(",", ":")).encode("utf-8"))
    return Tokens(sent + schema_bytes, len(output.encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS)

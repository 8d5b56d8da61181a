"""An OpenAI-compatible Responses endpoint on loopback, scripted by a test, answering with realistic payloads.

Each ``POST /v1/responses`` takes the next scripted step: a JSON response, one computed from the request, an
SSE stream (paced, or held until a condition), or an HTTP error. Every request body is kept, so tests can pin
the exact wire format raydag sends.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from actors.launch.background_server import BackgroundServer

_ids = itertools.count(1)


def usage(input_tokens: int = 812, output_tokens: int = 164) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_body(
    text: str | None,
    *,
    model: str = "gpt-test",
    refusal: str | None = None,
    tokens: tuple[int, int] = (812, 164),
) -> dict[str, Any]:
    """A completed Response as the API returns it."""
    number = next(_ids)
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "id": f"resp_{number:024x}",
        "object": "response",
        "created_at": 1_796_000_000 + number,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": [
            {
                "type": "message",
                "id": f"msg_{number:024x}",
                "status": "completed",
                "role": "assistant",
                "content": content,
            }
        ],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": True}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage(*tokens),
        "user": None,
        "metadata": {},
    }


@dataclass
class Json:
    body: dict[str, Any]
    delay_s: float = 0.0
    """How long the model takes before it answers (a whole response is sent only once it is written)."""


@dataclass
class Stream:
    """The text arrives in ``chunks``, one ``response.output_text.delta`` every ``pace_s``."""

    chunks: list[str]
    pace_s: float = 0.0
    tokens: tuple[int, int] = (812, 164)
    first_token_s: float = 0.0
    """How long the model takes before the first delta (time to first token)."""
    hold_after: int | None = None
    """Send this many chunks, then hold the rest until ``release()`` is true (at most ``HOLD_LIMIT_S``)."""
    release: Callable[[], bool] | None = None


HOLD_LIMIT_S = 20.0
"""How long a held stream waits for its release before it sends the rest anyway (and records that)."""


@dataclass
class Reply:
    """An answer computed from the request it answers: a model that acts on what it was sent."""

    answer: Callable[[dict[str, Any]], Any]
    """The request body in, the JSON value the model writes out."""


@dataclass
class Fail:
    status: int
    body: dict[str, Any] = field(
        default_factory=lambda: {"error": {"message": "rate limited", "type": "rate_limit"}}
    )


Step = Json | Stream | Reply | Fail


class MockModel:
    def __init__(self) -> None:
        self.script: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self.releases: list[bool] = []
        """For each held stream: whether its release came (``False``: it gave up waiting)."""
        self._http = BackgroundServer()
        self.url = self._http.url + "/v1"

    def start(self) -> MockModel:
        self._http.start(Starlette(routes=[Route("/v1/responses", self._respond, methods=["POST"])]))
        return self

    def stop(self) -> None:
        self._http.stop()

    def answer(self, *steps: Step) -> None:
        self.script.extend(steps)

    def answer_json(self, value: Any, **kwargs: Any) -> None:
        self.answer(Json(response_body(json.dumps(value), **kwargs)))

    async def _respond(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        if not self.script:
            return JSONResponse({"error": {"message": "the test scripted no more answers"}}, status_code=500)
        step = self.script.pop(0)
        match step:
            case Json():
                await asyncio.sleep(step.delay_s)
                return JSONResponse(step.body)
            case Reply():
                return JSONResponse(response_body(json.dumps(step.answer(body))))
            case Fail():
                return JSONResponse(step.body, status_code=step.status, headers={"retry-after-ms": "10"})
            case Stream():
                return StreamingResponse(self._events(step), media_type="text/event-stream")

    async def _events(self, step: Stream) -> AsyncIterator[bytes]:
        final = response_body("".join(step.chunks), tokens=step.tokens)
        item = final["output"][0]["id"]
        sequence = itertools.count()

        def event(kind: str, **data: Any) -> bytes:
            payload = {"type": kind, "sequence_number": next(sequence), **data}
            return f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode()

        created = {**final, "status": "in_progress", "output": [], "usage": None}
        yield event("response.created", response=created)
        yield event("response.in_progress", response=created)
        yield event(
            "response.output_item.added",
            output_index=0,
            item={"type": "message", "id": item, "status": "in_progress", "role": "assistant", "content": []},
        )
        yield event(
            "response.content_part.added",
            item_id=item,
            output_index=0,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        )
        await asyncio.sleep(step.first_token_s)
        for index, chunk in enumerate(step.chunks):
            if index == step.hold_after:
                self.releases.append(await _released(step))
            if step.pace_s:
                await asyncio.sleep(step.pace_s)
            yield event(
                "response.output_text.delta",
                item_id=item,
                output_index=0,
                content_index=0,
                delta=chunk,
                logprobs=[],
            )
        text = "".join(step.chunks)
        yield event(
            "response.output_text.done", item_id=item, output_index=0, content_index=0, text=text, logprobs=[]
        )
        yield event(
            "response.content_part.done",
            item_id=item,
            output_index=0,
            content_index=0,
            part={"type": "output_text", "text": text, "annotations": [], "logprobs": []},
        )
        yield event("response.output_item.done", output_index=0, item=final["output"][0])
        yield event("response.completed", response=final)


async def _released(step: Stream) -> bool:
    assert step.release is not None, "a held stream needs a release condition"
    deadline = asyncio.get_running_loop().time() + HOLD_LIMIT_S
    while not step.release():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True

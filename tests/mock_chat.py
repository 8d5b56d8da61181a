"""An OpenAI-compatible Chat Completions endpoint on loopback that behaves like llama.cpp's server, scripted by
a test: ``POST /v1/responses`` is 404, a strict ``json_schema`` response format is a 500, and
``{"type": "json_object"}`` (with or without a ``schema``) takes the next scripted step. Every request body is
kept, with the path it was sent to, so tests can pin the exact wire format raydag sends."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actors.launch.background_server import BackgroundServer

_ids = itertools.count(1)


def completion_body(
    text: str, *, model: str = "smollm2", tokens: tuple[int, int] | None = (900, 120)
) -> dict[str, Any]:
    """A chat completion as llama-cpp-python's server returns it; ``tokens`` ``None``: no ``usage`` at all."""
    number = next(_ids)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{number:08x}",
        "object": "chat.completion",
        "created": 1_796_000_000 + number,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
    }
    if tokens is not None:
        body["usage"] = {
            "prompt_tokens": tokens[0],
            "completion_tokens": tokens[1],
            "total_tokens": sum(tokens),
        }
    return body


@dataclass
class Answer:
    """The model writes ``text`` (a JSON value is dumped first)."""

    value: Any
    tokens: tuple[int, int] | None = (900, 120)

    def text(self) -> str:
        return self.value if isinstance(self.value, str) else json.dumps(self.value)


@dataclass
class Computed:
    """An answer computed from the request it answers."""

    answer: Callable[[dict[str, Any]], Any]


ChatStep = Answer | Computed


class MockChatModel:
    def __init__(self) -> None:
        self.script: list[ChatStep] = []
        self.requests: list[tuple[str, dict[str, Any]]] = []
        """``(path, body)`` of every request, refused ones included."""
        self._http = BackgroundServer()
        self.url = self._http.url + "/v1"

    def start(self) -> MockChatModel:
        self._http.start(
            Starlette(
                routes=[
                    Route("/v1/chat/completions", self._complete, methods=["POST"]),
                    Route("/v1/responses", self._not_found, methods=["POST"]),
                ]
            )
        )
        return self

    def stop(self) -> None:
        self._http.stop()

    def answer(self, *steps: ChatStep) -> None:
        self.script.extend(steps)

    @property
    def completions(self) -> list[dict[str, Any]]:
        """The bodies sent to ``/v1/chat/completions``."""
        return [body for path, body in self.requests if path == "/v1/chat/completions"]

    async def _not_found(self, request: Request) -> Response:
        self.requests.append((request.url.path, await request.json()))
        return JSONResponse({"detail": "Not Found"}, status_code=404)

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append((request.url.path, body))
        if (body.get("response_format") or {}).get("type") == "json_schema":
            # llama-cpp-python fails inside its grammar conversion: a 500 the SDK retries.
            return JSONResponse({"error": {"message": "Internal Server Error"}}, status_code=500)
        if not self.script:
            return JSONResponse({"error": {"message": "the test scripted no more answers"}}, status_code=500)
        step = self.script.pop(0)
        match step:
            case Answer():
                return JSONResponse(completion_body(step.text(), model=body["model"], tokens=step.tokens))
            case Computed():
                return JSONResponse(completion_body(json.dumps(step.answer(body)), model=body["model"]))

"""Plan nodes out of a model's output while it is still being written.

The strict schema makes the output ``{"question": null, "nodes": [ {...}, {...}, ... ]}``. This scanner finds
each element of that array the moment its closing brace arrives, so the runtime can validate, authorize and
dispatch it before the rest of the plan exists; once the output is whole, ``document`` reads the rest of it
(the question a model asks instead of planning).
"""

from __future__ import annotations

import json
from typing import Any


class MalformedStream(ValueError):
    """The output stopped being the plan shape; what was already emitted stands."""


class PlanNodeStream:
    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._element_start: int | None = None
        self._buffer = ""

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        """Consume ``chunk``; return the nodes it completed, in order."""
        completed: list[dict[str, Any]] = []
        base = len(self._buffer)
        self._buffer += chunk
        for offset, char in enumerate(chunk):
            position = base + offset
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                continue
            if char == '"':
                self._in_string = True
            elif char in "{[":
                if char == "{" and self._depth == 2:
                    self._element_start = position
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth < 0:
                    raise MalformedStream("a closing bracket with nothing open")
                if char == "}" and self._depth == 2 and self._element_start is not None:
                    completed.append(self._element(self._buffer[self._element_start : position + 1]))
                    self._element_start = None
        return completed

    @property
    def text(self) -> str:
        """Everything read so far."""
        return self._buffer

    @property
    def closed(self) -> bool:
        """The whole JSON document has been read."""
        return self._depth == 0 and bool(self._buffer.strip())

    def document(self) -> dict[str, Any]:
        """The whole output as one object, once ``closed``."""
        try:
            whole = json.loads(self._buffer)
        except json.JSONDecodeError as exc:
            raise MalformedStream(f"the plan output is not JSON: {exc.msg}") from None
        if not isinstance(whole, dict):
            raise MalformedStream("the plan output is not an object")
        return whole

    @staticmethod
    def _element(text: str) -> dict[str, Any]:
        try:
            node = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MalformedStream(f"a plan node is not JSON: {exc.msg}") from None
        if not isinstance(node, dict):
            raise MalformedStream("a plan node is not an object")
        return node

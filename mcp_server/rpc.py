"""What an MCP request body asks for, as far as authorization cares: pure parsing, no I/O.

The guard reads the body before the SDK does, so the two must never read one body differently: anything
this module cannot read unambiguously (invalid JSON, duplicate keys, a batch, a call without a string
name) is refused here rather than handed on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dag.errors import RaydagError

TOOLS_CALL = "tools/call"
RESOURCES_READ = "resources/read"

INVALID_REQUEST = -32600
PARSE_ERROR = -32700


class BodyRejected(RaydagError):
    """A body the guard refuses to interpret; answered as a JSON-RPC error with HTTP 400."""

    def __init__(self, code: int, message: str, request_id: str | int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass(frozen=True)
class Target:
    """The one JSON-RPC message of a request: its method and, for a call or a read, what it names."""

    method: str | None
    tool: str | None = None
    uri: str | None = None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise BodyRejected(PARSE_ERROR, "duplicate keys in a JSON object")
    return dict(pairs)


def parse_target(body: bytes) -> Target:
    """The message ``body`` carries. An empty body (a GET or DELETE) has no method."""
    return target_of(decode(body)) if body.strip() else Target(method=None)


def decode(body: bytes) -> Any:
    """The JSON value of a non-empty ``body``; refused if it is not unambiguous JSON."""
    try:
        return json.loads(body, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError):
        raise BodyRejected(PARSE_ERROR, "the body is not valid JSON") from None


def target_of(message: Any) -> Target:
    """What a decoded body asks for."""
    if not isinstance(message, dict):
        raise BodyRejected(INVALID_REQUEST, "Body must be a single JSON-RPC request or notification object")
    method = message.get("method")
    request_id = message.get("id")
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    if method is not None and not isinstance(method, str):
        raise BodyRejected(INVALID_REQUEST, "method must be a string", request_id)
    params = message.get("params")
    if method in (TOOLS_CALL, RESOURCES_READ):
        key = "name" if method == TOOLS_CALL else "uri"
        value = params.get(key) if isinstance(params, dict) else None
        if not isinstance(value, str):
            raise BodyRejected(INVALID_REQUEST, f"{method} needs a string params.{key}", request_id)
        if method == TOOLS_CALL:
            return Target(method, tool=value)
        return Target(method, uri=value)
    return Target(method)

"""A 2026-07-28 ``tools/call`` as the protocol has it: one HTTP POST, one JSON-RPC answer, nothing else.

The stateless era needs no session, no handshake and no stream per call, so a server built for raydag's task
tokens is called without the SDK client's machinery (a task group, memory streams and a dispatcher per
request: ~1–2 ms of CPU per call on this machine, docs/BENCHMARKS.md). The request carries what the SDK's
modern stamp puts on it — the ``_meta`` envelope (protocol version, client info, capabilities) and the
``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers — plus the call's own task token and its
trace context. A toolset server that takes raydag's task tokens and is pinned to the stateless era takes this
path too, unless a tool's input schema mirrors arguments into ``Mcp-Param-*`` headers. Such a server asking
for input (a result that is not complete) is a protocol failure of the call, as it is for raydag's own
endpoint: a re-send through the SDK would carry the same single-use token, which such a server refuses as a
replay. The 2025-11-25 era, and everyone else's servers, keep the SDK path (``actors.calls.mcp``).

The POST goes over aiohttp rather than the SDK's ``httpx2``: one kept-alive session per ``McpConnections``,
at about a third of the client CPU per request here (0.4–0.5 against 1.4–1.7 ms, docs/BENCHMARKS.md).
"""

from __future__ import annotations

import itertools
import json
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    encode_header_value,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    CallToolResult,
)
from opentelemetry import propagate
from pydantic import ValidationError

from actors.calls.call import MODERN_PROTOCOL
from actors.calls.mcp.session import CLIENT_INFO
from dag.storable import MAX_DEPTH

_CLIENT_INFO = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)
_ids = itertools.count(1)
_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30.0)
"""A connection gets 30 s; how long an answer may take is the call's own deadline (``ToolCall.timeout_s``,
which the caller enforces), so a tool declared slower than 30 s is not cut short here."""


class Refused(Exception):
    """The server refused the POST: an HTTP error status without a JSON-RPC error to say more."""

    def __init__(self, status: int, challenge: str) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.challenge = challenge
        """The response's ``WWW-Authenticate`` (an insufficient scope says so there)."""


class MalformedAnswer(ValueError):
    """The server answered the call, but not with anything raydag can read: a ``code`` and a message for the
    node's protocol error (the answer's own text is not repeated)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


KEEPALIVE_S = 4.0
"""How long an idle connection is kept for the next call: under the 5 s after which uvicorn (the tool server's
host, and a common one) closes an idle connection. Kept longer (aiohttp's default is 15 s), a call could be
sent on a connection the server was closing at that moment, and fail as CONNECTION_FAILED; it cannot be
sent again on another, since its single-use token may already have been recorded."""


def open_session(ssl_context: ssl.SSLContext) -> aiohttp.ClientSession:
    """The kept-alive HTTP session one-POST calls share; open it on the event loop that uses it."""
    connector = aiohttp.TCPConnector(ssl=ssl_context, keepalive_timeout=KEEPALIVE_S)
    return aiohttp.ClientSession(connector=connector, timeout=_TIMEOUT)


async def post_tool_call(
    http: aiohttp.ClientSession,
    url: str,
    token: str | None,
    tool: str,
    arguments: dict[str, Any],
    max_bytes: int,
    *,
    meta: Mapping[str, Any] | None = None,
) -> CallToolResult:
    """Call ``tool`` with one POST bearing ``token``; raise ``MCPError`` for a JSON-RPC error, ``Refused`` for
    a refusal, ``MalformedAnswer`` for an answer it cannot use (``OUTPUT_TOO_LARGE`` past ``max_bytes``, read
    no further), and aiohttp's errors for a connection that failed."""
    request_id = next(_ids)
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                **(meta or {}),
                PROTOCOL_VERSION_META_KEY: MODERN_PROTOCOL,
                CLIENT_INFO_META_KEY: _CLIENT_INFO,
                CLIENT_CAPABILITIES_META_KEY: {},  # elicitation is declined, so none is offered
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        MCP_PROTOCOL_VERSION_HEADER: MODERN_PROTOCOL,
        MCP_METHOD_HEADER: "tools/call",
        MCP_NAME_HEADER: encode_header_value(tool),
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    propagate.inject(headers)  # the call's span: the server's span joins the run's trace
    async with http.post(url, data=json.dumps(body), headers=headers) as response:
        status, kind, challenge = (
            response.status,
            response.content_type,
            response.headers.get("WWW-Authenticate", ""),
        )
        raw = await _body(response, max_bytes)
    message = rpc_answer(status, challenge, kind, raw, request_id)
    try:
        result = CallToolResult.model_validate(message.get("result"))
    except ValidationError as exc:
        raise MalformedAnswer(
            "MALFORMED_ANSWER",
            f"the server's answer is not a tools/call result ({exc.error_count()} problem(s))",
        ) from None
    if result.result_type != "complete":
        raise MCPError(
            INTERNAL_ERROR, f"the server answered a {result.result_type!r} result, not a complete one"
        )
    return result


def rpc_answer(status: int, challenge: str, kind: str, raw: bytes, request_id: int) -> dict[str, Any]:
    """The JSON-RPC answer to ``request_id`` of an HTTP response: ``MCPError`` for a JSON-RPC error,
    ``Refused`` for a refusal that says no more than its status."""
    # 400 and 404 may carry a JSON-RPC error, which says more than the status; other refusals carry none.
    if status >= 400 and status not in (400, 404):
        raise Refused(status, challenge)
    try:
        message = answer_of(kind, raw, request_id)
    except (ValueError, MCPError):
        if status >= 400:
            raise Refused(status, challenge) from None
        raise
    error = message.get("error")
    if isinstance(error, dict):
        raise MCPError(
            int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data")
        )
    if status >= 400:
        raise Refused(status, challenge)
    return message


async def _body(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The response's body, unless it is longer than ``max_bytes``: then no more of it is read."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > max_bytes:
            raise MalformedAnswer(
                "OUTPUT_TOO_LARGE", f"the answer is larger than the {max_bytes:,} bytes read"
            )
        chunks.append(chunk)
    return b"".join(chunks)


def answer_of(kind: str, raw: bytes, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to ``request_id``: the body itself, or the matching event of an SSE stream."""
    try:
        return _parsed_answer(kind, raw, request_id)
    except RecursionError:  # nested past the parser's frames, and far past what a run records
        raise MalformedAnswer(
            "OUTPUT_UNSTORABLE",
            f"the answer nests too deep to read (a run records no more than {MAX_DEPTH} levels)",
        ) from None


def _parsed_answer(kind: str, raw: bytes, request_id: int) -> dict[str, Any]:
    if kind == "text/event-stream":
        for line in raw.decode().splitlines():
            if line.startswith("data:") and line[5:].strip():  # a priming event carries no data
                message = json.loads(line[5:])
                # a request of the server's own (its ids are its own) is not the answer, whatever its id
                if isinstance(message, dict) and message.get("id") == request_id and "method" not in message:
                    return message
        raise MCPError(INTERNAL_ERROR, "the event stream ended without an answer to the call")
    message = json.loads(raw)
    if not isinstance(message, dict):
        raise MCPError(INTERNAL_ERROR, "the server answered something other than a JSON-RPC message")
    return message

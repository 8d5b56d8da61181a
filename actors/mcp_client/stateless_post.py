"""A 2026-07-28 ``tools/call`` as the protocol has it: one HTTP POST, one JSON-RPC answer, nothing else.

The stateless era needs no session, no handshake and no stream per call, so raydag's own tool server is called
without the SDK client's machinery (a task group, memory streams and a dispatcher per request: ~1–2 ms of CPU
per call on this machine, docs/BENCHMARKS.md). The request carries what the SDK's modern stamp puts on it —
the ``_meta`` envelope (protocol version, client info, capabilities) and the ``MCP-Protocol-Version``,
``Mcp-Method`` and ``Mcp-Name`` headers — over the same kept-alive ``httpx2`` client, whose auth flow adds the
call's token and trace context and notes refusals. A toolset server that takes raydag's task tokens and is
pinned to the stateless era takes this path too, unless a tool's input schema mirrors arguments into
``Mcp-Param-*`` headers. Such a server asking for input (a result that is not complete) is a protocol
failure of the call, as it is for raydag's own endpoint: a re-send through the SDK would carry the same
single-use token, which such a server refuses as a replay. The 2025-11-25 era keeps the SDK path
(``actors.mcp_client``).
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
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

from actors.mcp_client.session import CLIENT_INFO

_CLIENT_INFO = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)
_ids = itertools.count(1)


async def post_tool_call(
    http: httpx2.AsyncClient, url: str, protocol: str, tool: str, arguments: dict[str, Any]
) -> CallToolResult:
    """Call ``tool`` with one POST; raise ``MCPError`` for a JSON-RPC error, ``HTTPStatusError`` for a refusal."""
    request_id = next(_ids)
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                PROTOCOL_VERSION_META_KEY: protocol,
                CLIENT_INFO_META_KEY: _CLIENT_INFO,
                CLIENT_CAPABILITIES_META_KEY: {},  # elicitation is declined, so none is offered
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        MCP_PROTOCOL_VERSION_HEADER: protocol,
        MCP_METHOD_HEADER: "tools/call",
        MCP_NAME_HEADER: encode_header_value(tool),
    }
    response = await http.post(url, content=json.dumps(body), headers=headers)
    if response.status_code >= 400 and response.status_code not in (400, 404):
        response.raise_for_status()
    message = _answer(response, request_id)
    error = message.get("error")
    if isinstance(error, dict):
        raise MCPError(
            int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data")
        )
    if response.status_code >= 400:
        response.raise_for_status()
    result = CallToolResult.model_validate(message.get("result"))
    if result.result_type != "complete":
        raise MCPError(
            INTERNAL_ERROR, f"the server answered a {result.result_type!r} result, not a complete one"
        )
    return result


def _answer(response: httpx2.Response, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to ``request_id``: the body itself, or the matching event of an SSE stream."""
    kind = response.headers.get("content-type", "").split(";", 1)[0].strip()
    if kind == "text/event-stream":
        for line in response.text.splitlines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
        raise MCPError(INTERNAL_ERROR, "the event stream ended without an answer to the call")
    message = response.json()
    if not isinstance(message, dict):
        raise MCPError(INTERNAL_ERROR, "the server answered something other than a JSON-RPC message")
    return message

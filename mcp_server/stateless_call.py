"""A 2026-07-28 ``tools/call`` of one of this server's tools, answered without the SDK's per-request plumbing.

In the stateless era a call is one POST and one JSON answer. The SDK's entry for it builds, per request, a
Starlette request, a second host and content check, a second parse of the body, a connection, a dispatch
context, a runner with its middleware chain (a span, the request-state boundary), an anyio cancel scope for
the teardown and a response object: about half of the tool server's CPU per call (docs/BENCHMARKS.md,
"MCP tool-call latency"). The tool server answers many calls at once on one core, so that half is latency
too: the sixteenth call of a layer waits for the fifteen before it.

This path skips the plumbing, not the rules. It takes a request only when the SDK would route it to its
stateless entry and every check the SDK makes there passes, decided by the SDK's own functions (the inbound
ladder of envelope and routing headers, the per-version request surface); it calls the tool through the
server's own ``call_tool`` and shapes the answer through the per-version result surface, as the SDK does.
Everything else — another era, a notification, a malformed or ambiguous request, a tool that mirrors
arguments into ``Mcp-Param-*`` headers, a request that carries ``requestState`` — goes on to the SDK, which
answers it as before. ``tests/integration/test_stateless_call.py`` holds the two answers equal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.runner import modern_error_data
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    MCP_PROTOCOL_VERSION_HEADER,
    InboundModernRoute,
    classify_inbound_request,
    x_mcp_header_map,
)
from mcp_types import SERVER_INFO_META_KEY, CallToolRequestParams, CallToolResult, TextContent
from mcp_types import methods as surfaces
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette._utils import get_route_path

from mcp_server._asgi import respond_json
from mcp_server.auth import Scope, Send

log = logging.getLogger(__name__)

TOOLS_CALL = "tools/call"
_VERSION_HEADER = MCP_PROTOCOL_VERSION_HEADER.lower()
_PARAM_HEADER_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})
_PARAMS = frozenset({"name", "arguments", "_meta"})
_JSON_ACCEPTED = frozenset({"application/json", "application/*", "*/*"})


class StatelessCalls:
    """Answers the plain stateless ``tools/call`` requests of ``server`` at ``path``; see the module docstring."""

    def __init__(
        self, server: MCPServer[Any], tools: Iterable[Tool], server_info: Mapping[str, Any], path: str
    ) -> None:
        """``tools``: those of ``server`` this path may call; ``server_info``: the ``serverInfo`` stamp the
        SDK puts on ``server``'s stateless answers."""
        self._server = server
        self._path = path
        self._server_info = dict(server_info)
        # A tool that mirrors arguments into headers needs the SDK's header check against its schema.
        self._tools = frozenset(tool.name for tool in tools if not x_mcp_header_map(tool.parameters))
        self.answered = 0
        """Requests this path has answered."""

    async def answer(self, scope: Scope, headers: Mapping[str, str], message: Any, send: Send) -> bool:
        """Answer the request if it is one this path takes, and say whether it did. ``headers``: the request's,
        by lower-case name (a repeated routing header has been refused already); ``message``: its decoded body.

        Runs with the verified claims of the request in ``auth.current_claims``, as the SDK's handler does.
        """
        request = self._plain_call(scope, headers, message)
        if request is None:
            return False
        request_id, version, name, arguments = request
        self.answered += 1
        try:
            result = await self._server.call_tool(name, arguments)
        except MCPError as exc:
            await respond_json(
                send, _error_status(exc), {"jsonrpc": "2.0", "id": request_id, "error": _error(exc)}
            )
            return True
        except Exception as exc:  # the SDK's handler answers a failed tool as an ``isError`` result
            _log_failure(name, exc)
            result = CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        if not isinstance(result, CallToolResult):  # input_required: raydag's tools never ask
            raise TypeError(
                f"{name} answered {type(result).__name__}; this path serves complete results only"
            )
        dumped = surfaces.serialize_server_result(
            TOOLS_CALL, version, result.model_dump(by_alias=True, mode="json", exclude_none=True)
        )
        dumped.setdefault("resultType", "complete")
        meta = dumped.get("_meta")
        if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None):
            dumped["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: dict(self._server_info)}
        await respond_json(send, 200, {"jsonrpc": "2.0", "id": request_id, "result": dumped})
        return True

    def _plain_call(
        self, scope: Scope, headers: Mapping[str, str], message: Any
    ) -> tuple[int | str, str, str, dict[str, Any]] | None:
        """``(id, protocol version, tool, arguments)`` of a request this path takes, else ``None``."""
        if scope["method"] != "POST" or get_route_path(scope) != self._path:
            return None
        if headers.get(_VERSION_HEADER) not in MODERN_PROTOCOL_VERSIONS:
            return None  # the handshake era, or a version the SDK must refuse
        if not headers.get("content-type", "").lower().startswith("application/json"):
            return None
        accepted = {
            kind.strip().split(";")[0].strip().lower() for kind in headers.get("accept", "").split(",")
        }
        if not accepted & _JSON_ACCEPTED:
            return None
        if any(name.startswith(_PARAM_HEADER_PREFIX) for name in headers):
            return None
        if not isinstance(message, dict) or message.keys() != _ENVELOPE or message["jsonrpc"] != "2.0":
            return None
        request_id, params = message["id"], message["params"]
        if (
            isinstance(request_id, bool)
            or not isinstance(request_id, int | str)
            or message["method"] != TOOLS_CALL
        ):
            return None
        if not isinstance(params, dict) or not params.keys() <= _PARAMS:
            return None
        name, arguments = params.get("name"), params.get("arguments", {})
        if name not in self._tools or not isinstance(arguments, dict):
            return None
        verdict = classify_inbound_request(message, headers=headers)
        if not isinstance(verdict, InboundModernRoute):
            return None
        try:  # the version's request surface, then the parameters the SDK's handler is given
            surfaces.validate_client_request(TOOLS_CALL, verdict.protocol_version, params)
            CallToolRequestParams.model_validate(params, by_name=False)
        except (ValidationError, KeyError, ValueError):
            return None
        return request_id, verdict.protocol_version, name, arguments


def _error(exc: MCPError) -> dict[str, Any]:
    return modern_error_data(exc).model_dump(by_alias=True, mode="json", exclude_none=True)


def _error_status(exc: MCPError) -> int:
    return ERROR_CODE_HTTP_STATUS.get(modern_error_data(exc).code, 200)


def _log_failure(name: str, exc: Exception) -> None:
    """As the SDK logs a failed tool: a rejection or a refusal briefly, a crash with its traceback."""
    if isinstance(exc, ToolError) and not isinstance(exc, UnexpectedToolError):
        log.info("Tool %r failed: %r", name, str(exc))
    else:
        log.exception("Tool %r raised an unexpected exception", name)

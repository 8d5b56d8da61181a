"""The runtime's side of a tool call: one MCP request with a task token, classified into an outcome."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from dag.contracts import ToolCatalogue
from dag.events import ErrorKind, NodeError

_SSL_CONTEXT = ssl.create_default_context()
"""Loading CA certificates costs ~35 ms; a worker builds the context once, not per call."""

MODERN_PROTOCOL = "2026-07-28"
"""Stateless: a call is one HTTP request, no handshake. ``"legacy"`` selects the 2025-11-25 handshake."""


@dataclass(frozen=True)
class ToolCall:
    """Everything a worker needs for one call. The token is minted for this call alone."""

    run_id: str
    node_id: str
    attempt: int
    tool: str
    args: dict[str, Any]
    mcp_url: str
    token: str
    timeout_s: float
    protocol: str = MODERN_PROTOCOL


@dataclass(frozen=True)
class ToolOutcome:
    output: Any
    error: NodeError | None
    started_at: datetime
    finished_at: datetime

    @property
    def ok(self) -> bool:
        return self.error is None


async def call_tool(call: ToolCall, catalogue: ToolCatalogue) -> ToolOutcome:
    """Call one tool and classify what happened; never raises for a failure of the call itself."""
    started = datetime.now(UTC)
    try:
        with anyio.fail_after(call.timeout_s):
            output, error = await _call(call, catalogue)
    except TimeoutError:
        output, error = (
            None,
            NodeError(
                kind=ErrorKind.TRANSIENT, code="TIMEOUT", message=f"no answer within {call.timeout_s:g}s"
            ),
        )
    except Exception as exc:  # a failed call must become a recorded outcome, not a lost task
        output, error = None, _classify_exception(_leaf(exc))
    return ToolOutcome(output=output, error=error, started_at=started, finished_at=datetime.now(UTC))


async def _call(call: ToolCall, catalogue: ToolCatalogue) -> tuple[Any, NodeError | None]:
    refusals: list[int] = []

    async def note_refusal(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            refusals.append(response.status_code)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {call.token}"},
        timeout=httpx2.Timeout(call.timeout_s),
        verify=_SSL_CONTEXT,
        event_hooks={"response": [note_refusal]},
    )
    try:
        async with (
            http,
            Client(streamable_http_client(call.mcp_url, http_client=http), mode=call.protocol) as client,
        ):
            result = await client.call_tool(call.tool, call.args)
    except Exception:
        if refusals:  # the SDK reports a refused request only as "Server returned an error response"
            return None, _classify_status(refusals[0])
        raise
    if result.is_error:
        return None, _classify_tool_error(" ".join(getattr(block, "text", "") for block in result.content))
    contract = catalogue[call.tool]
    try:
        contract.output_model.model_validate(result.structured_content)
    except ValidationError as exc:
        return None, NodeError(
            kind=ErrorKind.PROTOCOL,
            code="OUTPUT_SCHEMA_MISMATCH",
            message=f"{call.tool} answered outside its output schema ({exc.error_count()} errors)",
        )
    return result.structured_content, None


_KIND_OF_CODE = {
    "INSUFFICIENT_SCOPE": ErrorKind.AUTHORIZATION,
    "TOKEN_NOT_FOR_TOOL": ErrorKind.AUTHORIZATION,
    "UPSTREAM_UNAVAILABLE": ErrorKind.TRANSIENT,
}
"""Tool error codes that are not business answers; every other refusal by a tool is a business answer."""


def _classify_tool_error(text: str) -> NodeError:
    """An ``isError`` result: the tool ran and refused. Business codes arrive as JSON from caseops."""
    try:
        error = json.loads(text)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        if "validation error" in text or "Unknown tool" in text:
            return NodeError(kind=ErrorKind.CONTRACT, code="TOOL_REJECTED_ARGUMENTS", message=text[:500])
        return NodeError(kind=ErrorKind.BUSINESS, code="TOOL_ERROR", message=text[:500])
    return NodeError(kind=_KIND_OF_CODE.get(code, ErrorKind.BUSINESS), code=code, message=message)


def _classify_exception(exc: BaseException) -> NodeError:
    if isinstance(exc, MCPError):
        return NodeError(kind=ErrorKind.PROTOCOL, code=f"JSONRPC_{exc.code}", message=exc.message[:500])
    if isinstance(exc, httpx2.HTTPStatusError):
        return _classify_status(exc.response.status_code)
    if isinstance(exc, httpx2.TransportError | ConnectionError | TimeoutError):
        return NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message=type(exc).__name__)
    # Only the exception's type is recorded: its text may echo arguments or tokens.
    return NodeError(kind=ErrorKind.UNKNOWN_EFFECT, code="UNEXPECTED_ERROR", message=type(exc).__name__)


def _classify_status(status: int) -> NodeError:
    if status in (401, 403):
        return NodeError(
            kind=ErrorKind.AUTHORIZATION, code=f"HTTP_{status}", message="the tool server refused the token"
        )
    kind = ErrorKind.TRANSIENT if status in (429, 502, 503, 504) else ErrorKind.PROTOCOL
    return NodeError(kind=kind, code=f"HTTP_{status}", message=f"the tool server answered HTTP {status}")


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc

"""What a call's answer, or its failure, means for the node: an output to record, or a classified error.

Classification reads what the server said only where the server is the authority (its result, a coded
refusal); whether the connection was lost, a request refused or an answer cut off is what the transport saw
(``actors.calls.mcp.watch``), never a code or a text a server chose. A server's ordinary JSON-RPC error
-32000 is its answer (``JSONRPC_-32000``, a protocol failure), not a lost connection; a call whose request
was cut off by its connection's end (``CallWatch.cut_off``) is a lost connection, whatever the session
raised for it.

Every error is passed through the call's ``Redactor`` (secrets out, then cut to length) by the caller; every
output is checked here, in this order: content blocks counted, a value no run can record refused, its size
measured against the tool's bound, secrets replaced, then its schema checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeVar

import aiohttp
import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_PARAMS, CallToolResult
from pydantic import ValidationError

from actors.calls.mcp.answers import AnswerFault
from actors.calls.mcp.redaction import Redactor
from actors.calls.mcp.stateless_post import MalformedAnswer, Refused
from actors.calls.mcp.stdio import ServerUnavailable
from actors.calls.mcp.watch import CallWatch
from actors.toolsets.credentials import CredentialUnavailable
from dag.contracts import ToolContract
from dag.events import ErrorKind, NodeError
from dag.storable import unfit_values


class ConnectionLost(Exception):
    """The transport says the connection a call was sent on is gone (an HTTP session's stream closed): the
    call's answer will never come. (Over stdio the call's ``CallWatch.cut_off`` says so.)"""


def classify_result(
    tool: str, result: CallToolResult, contract: ToolContract, redactor: Redactor
) -> tuple[Any, NodeError | None]:
    """The output ``result`` records, or why it records none."""
    if len(result.content) > contract.max_content_blocks:
        return None, too_large(
            f"{tool} answered with {len(result.content):,} content blocks, more than the "
            f"{contract.max_content_blocks:,} it may"
        )
    if result.is_error:
        return None, classify_tool_error(result)
    output = result.structured_content
    if output is None and contract.output_schema is None:  # no structured output declared: the content is it
        output = {
            "content": [
                block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
            ]
        }
    # Before the schema: a value nested past every limit is not handed to a recursive validator.
    unfit = next(unfit_values(output), None)
    if unfit is not None:  # JSON it may be, but no run can record it: not an answer raydag can act on
        pointer, reason = unfit
        message = f"{tool} answered with a value no run can record ({reason}), at {pointer or '/'}"
        return None, NodeError(kind=ErrorKind.PROTOCOL, code="OUTPUT_UNSTORABLE", message=message)
    dumped = json.dumps(output, ensure_ascii=False, separators=(",", ":"))
    size = len(dumped.encode())
    if size > contract.max_output_bytes:
        return None, too_large(
            f"{tool} answered with {size:,} bytes of output, more than the {contract.max_output_bytes:,} "
            "it may record"
        )
    output = redactor.value(output, dumped)
    problem = contract.output_problem(output)
    if problem is not None:
        message = f"{tool} answered outside its output schema: {problem}"
        return None, NodeError(kind=ErrorKind.PROTOCOL, code="OUTPUT_SCHEMA_MISMATCH", message=message)
    return contract.with_lines(output), None


def too_large(message: str) -> NodeError:
    return NodeError(kind=ErrorKind.PROTOCOL, code="OUTPUT_TOO_LARGE", message=message)


def connection_failed(message: str) -> NodeError:
    """The call's answer can never come: its connection is gone (transient, tried again if the tool may be)."""
    return NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message=message)


_KIND_OF_CODE = {
    "INSUFFICIENT_SCOPE": ErrorKind.AUTHORIZATION,
    "TOKEN_NOT_FOR_TOOL": ErrorKind.AUTHORIZATION,
    "UNAUTHENTICATED": ErrorKind.AUTHORIZATION,
    "INVALID_ARGUMENTS": ErrorKind.CONTRACT,
    "UPSTREAM_UNAVAILABLE": ErrorKind.TRANSIENT,
}
"""Tool error codes that are not business answers; every other refusal by a tool is a business answer."""


def classify_tool_error(result: CallToolResult) -> NodeError:
    """An ``isError`` result. The code is read from ``structuredContent`` first, then from the text (servers
    that put the JSON only there), then guessed from SDK wording; a refusal with no code is a protocol
    failure, never a business answer."""
    text = " ".join(getattr(block, "text", "") for block in result.content)
    error = _error_object(result.structured_content)
    if error is None:
        try:
            error = _error_object(json.loads(text))
        except (ValueError, RecursionError):
            error = None
    if error is not None:
        code, message = error
        return NodeError(kind=_KIND_OF_CODE.get(code, ErrorKind.BUSINESS), code=code, message=message)
    if "validation error" in text or "Unknown tool" in text:
        return NodeError(kind=ErrorKind.CONTRACT, code="TOOL_REJECTED_ARGUMENTS", message=text)
    # Without a code nothing says the tool judged the data: a crashed handler reads the same. Not evidence.
    return NodeError(kind=ErrorKind.PROTOCOL, code="TOOL_ERROR_UNCODED", message=text)


def _error_object(payload: Any) -> tuple[str, str] | None:
    """``(code, message)`` of ``{"error": {"code": ..., "message": ...}}``, or ``None`` for anything else."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), str):
        return error["code"], str(error.get("message", ""))
    return None


def classify_failure(exc: BaseException, watch: CallWatch) -> NodeError:
    """A call that raised: what the transport saw first, then what the exception says."""
    credential = _found(exc, CredentialUnavailable)
    if credential is not None:
        return unavailable(credential)
    if watch.cut_off:
        return connection_failed("the connection to the server ended before it answered")
    if watch.too_large is not None:
        return too_large(f"the answer is larger than the {watch.max_answer_bytes:,} bytes read for this call")
    leaf = _leaf(exc)
    if isinstance(leaf, MCPError) and isinstance(leaf.data, AnswerFault):
        return leaf.data.error  # raydag's own transport judged the answer (stdio)
    refusal = watch.refusal()
    if refusal is not None:
        return classify_status(refusal.status, refusal.challenge)
    lost = watch.lost or _found(exc, ConnectionLost) is not None
    return classify_exception(leaf, lost=lost)


_TRANSPORT_ERRORS = (
    httpx2.TransportError,
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    ConnectionError,
    TimeoutError,
)


def classify_exception(exc: BaseException, *, lost: bool = False) -> NodeError:
    """``exc``, the leaf of what a call raised; ``lost``: the transport saw the connection go."""
    if isinstance(exc, (ConnectionLost, *_TRANSPORT_ERRORS)) or (
        lost and isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED
    ):
        return connection_failed(type(exc).__name__)
    if isinstance(exc, MCPError):
        kind = ErrorKind.CONTRACT if exc.code == INVALID_PARAMS else ErrorKind.PROTOCOL
        return NodeError(kind=kind, code=f"JSONRPC_{exc.code}", message=exc.message)
    if isinstance(exc, Refused):
        return classify_status(exc.status, exc.challenge)
    if isinstance(exc, httpx2.HTTPStatusError):
        return classify_status(exc.response.status_code, exc.response.headers.get("www-authenticate", ""))
    if isinstance(exc, MalformedAnswer):
        return NodeError(kind=ErrorKind.PROTOCOL, code=exc.code, message=str(exc))
    if isinstance(exc, ValidationError):  # the SDK could not read the result as a tools/call result
        where = ", ".join(sorted({".".join(str(part) for part in error["loc"]) for error in exc.errors()}))
        return NodeError(
            kind=ErrorKind.PROTOCOL,
            code="MALFORMED_ANSWER",
            message=f"the answer is not a tools/call result ({exc.error_count()} problem(s) at {where or '/'})",
        )
    if isinstance(exc, RuntimeError) and any(words in str(exc) for words in _SDK_OUTPUT_MISMATCH):
        # The SDK checks outputs against the server's current listing before raydag sees them.
        return NodeError(
            kind=ErrorKind.PROTOCOL,
            code="OUTPUT_SCHEMA_MISMATCH",
            message="the tool answered outside the output schema its server lists",
        )
    # Only the exception's type is recorded: its text may echo arguments or tokens.
    return NodeError(kind=ErrorKind.UNKNOWN_EFFECT, code="UNEXPECTED_ERROR", message=type(exc).__name__)


_SDK_OUTPUT_MISMATCH = (
    "Invalid structured content returned by tool",
    "has an output schema but did not return structured content",
)
"""How ``ClientSession.validate_tool_result`` words an output outside the listed schema (a ``RuntimeError``)."""


def classify_status(status: int, challenge: str = "") -> NodeError:
    if status == 403 and 'error="insufficient_scope"' in challenge:
        return NodeError(
            kind=ErrorKind.AUTHORIZATION,
            code="INSUFFICIENT_SCOPE",
            message="the task token lacks the scope the tool needs",
        )
    if status in (401, 403):
        return NodeError(
            kind=ErrorKind.AUTHORIZATION, code=f"HTTP_{status}", message="the tool server refused the token"
        )
    kind = ErrorKind.TRANSIENT if status in (429, 502, 503, 504) else ErrorKind.PROTOCOL
    return NodeError(kind=kind, code=f"HTTP_{status}", message=f"the tool server answered HTTP {status}")


def unavailable(exc: BaseException) -> NodeError:
    """The server could not be reached at all: not running (stdio), or its credentials are missing here."""
    if isinstance(exc, CredentialUnavailable):
        return NodeError(kind=ErrorKind.AUTHORIZATION, code="CREDENTIAL_UNAVAILABLE", message=str(exc))
    assert isinstance(exc, ServerUnavailable)
    return NodeError(kind=ErrorKind.TRANSIENT, code="SERVER_UNAVAILABLE", message=str(exc))


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


_E = TypeVar("_E", bound=BaseException)


def _found(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first exception of ``kind`` in ``exc`` or the groups it nests."""
    for each in _all(exc):
        if isinstance(each, kind):
            return each
    return None


def _all(exc: BaseException) -> Iterator[BaseException]:
    yield exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _all(inner)

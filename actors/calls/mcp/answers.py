"""Reading one line a stdio MCP server wrote: a message for the session, or a fault that fails its request now.

The SDK's stdio reader logs and drops a line it cannot parse, so the request it answered waits out its whole
timeout, and it holds a line of any length in memory. raydag reads lines itself (``actors.calls.mcp.
stdio_transport``) and decides here, without I/O, what each one is:

- a message the session can take (a response, an error, a request or a notification from the server);
- an ``AnswerFault`` for the request it answers: not JSON raydag can parse (``JSONRPC_-32700``), an integer
  too long to record (``OUTPUT_UNSTORABLE``), a response that is not a JSON-RPC response with an object
  result (``MALFORMED_ANSWER``), or a line longer than the transport reads (``OUTPUT_TOO_LARGE``). Which
  request is found from the line's top-level ``id``, even where the rest cannot be parsed;
- nothing, for a line that answers no request (a server that prints a banner on stdout is common, and
  harmless).

A fault reaches the waiting call as a JSON-RPC error whose ``data`` is the ``AnswerFault`` object itself: a
Python object no server can send, so a server's own error is never mistaken for raydag's verdict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from dag.events import ErrorKind, NodeError

RequestId = int | str

MAX_INTEGER_DIGITS = 4300
"""Python's limit for converting an integer to text (``sys.get_int_max_str_digits``): a longer one could not
be written into any event."""
_ID_TEXT_MAX = 200


@dataclass(frozen=True)
class AnswerFault:
    """Why the answer to one request cannot be used, as the node's error."""

    error: NodeError


def fault(code: str, message: str) -> AnswerFault:
    return AnswerFault(NodeError(kind=ErrorKind.PROTOCOL, code=code, message=message))


def fault_message(request_id: RequestId, problem: AnswerFault) -> SessionMessage:
    """The JSON-RPC error that fails ``request_id`` with ``problem``; the SDK raises it as ``MCPError`` whose
    ``data`` is ``problem``."""
    error = types.ErrorData(code=types.INTERNAL_ERROR, message=problem.error.message, data=problem)
    return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


@dataclass(frozen=True)
class Faulted:
    """The line answers ``request_id`` but cannot be used."""

    request_id: RequestId
    problem: AnswerFault


@dataclass(frozen=True)
class Unattributed:
    """The line is an answer (it is too long to be anything else, or it is a response), but names no request
    raydag can find."""

    problem: AnswerFault


@dataclass(frozen=True)
class Ignored:
    """The line answers nothing: ``why`` is noted in the server's log."""

    why: str


Reading = SessionMessage | Faulted | Unattributed | Ignored


def read_line(line: bytes) -> Reading:
    """What one complete line of a server's stdout is (without its newline)."""
    if not line.strip():
        return Ignored("an empty line")
    try:
        value = json.loads(line, parse_int=_recordable_int)
    except _IntegerTooLong as exc:
        return _attributed(line, fault("OUTPUT_UNSTORABLE", str(exc)))
    except RecursionError:
        problem = fault("JSONRPC_-32700", "the answer nests too deep to parse")
        return _attributed(line, problem)
    except ValueError as exc:  # not JSON, or not UTF-8: only the parser's position is repeated, not the text
        where = f" ({exc.msg} at column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        return _attributed(line, fault("JSONRPC_-32700", f"the answer is not JSON{where}"), quiet=True)
    if not isinstance(value, dict):
        return Ignored(f"a JSON {type(value).__name__}, not a JSON-RPC message")
    return _message(value)


def oversized(prefix: bytes, tail: bytes, size: int, limit: int) -> Faulted | Unattributed:
    """A line longer than ``limit`` bytes, of which only its start and end were kept."""
    problem = fault(
        "OUTPUT_TOO_LARGE",
        f"the answer is larger than the {limit:,} bytes read from this server (at least {size:,})",
    )
    request_id = top_level_id(prefix.decode("utf-8", "replace"))
    if request_id is None:
        request_id = trailing_id(tail.decode("utf-8", "replace"))
    return Faulted(request_id, problem) if request_id is not None else Unattributed(problem)


def _message(value: dict[str, Any]) -> Reading:
    if "method" in value:  # a request or notification of the server's: the session answers or ignores it
        try:
            return SessionMessage(types.jsonrpc_message_adapter.validate_python(value, by_name=False))
        except ValidationError:
            return Ignored("a request or notification that is not JSON-RPC")
    request_id = value.get("id")
    if not _is_id(request_id):
        return Unattributed(fault("MALFORMED_ANSWER", "a response without a usable id"))
    assert isinstance(request_id, int | str)
    problem = _response_problem(value)
    if problem is not None:
        return Faulted(request_id, fault("MALFORMED_ANSWER", problem))
    if "error" in value:
        error = types.ErrorData.model_validate(value["error"])
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=value["result"]))


def _response_problem(value: dict[str, Any]) -> str | None:
    """What makes ``value`` something other than a JSON-RPC response or error, if anything."""
    if value.get("jsonrpc") != "2.0":
        return 'the answer is not JSON-RPC 2.0 ("jsonrpc" is not "2.0")'
    if ("result" in value) == ("error" in value):
        both = "result" in value
        return f"the answer has {'both a result and' if both else 'neither a result nor'} an error"
    if "result" in value:
        result = value["result"]
        if not isinstance(result, dict):
            return f"the answer's result is {_kind(result)}, not an object"
        return None
    error = value["error"]
    if not isinstance(error, dict):
        return f"the answer's error is {_kind(error)}, not an object"
    try:
        types.ErrorData.model_validate(error)
    except ValidationError as exc:
        return f"the answer's error is not a JSON-RPC error object ({exc.error_count()} problem(s))"
    return None


def _kind(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return type(value).__name__


def _attributed(line: bytes, problem: AnswerFault, *, quiet: bool = False) -> Reading:
    """``problem`` for the request the line names; a line naming none is noted and dropped if ``quiet``."""
    text = line[: 1 << 16].decode("utf-8", "replace")
    request_id = top_level_id(text)
    if request_id is None:
        request_id = trailing_id(line[-1024:].decode("utf-8", "replace"))
    if request_id is not None:
        return Faulted(request_id, problem)
    if quiet:
        return Ignored(problem.error.message)
    return Unattributed(problem)


def _is_id(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, str)


class _IntegerTooLong(ValueError):
    pass


def _recordable_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise _IntegerTooLong(
            f"the answer holds an integer of {digits:,} digits, more than a run can record "
            f"({MAX_INTEGER_DIGITS:,})"
        )
    return int(text)


_STRUCTURE = re.compile(r'["{}\[\]]')
_STRING_END = re.compile(r'["\\]')
_ID_TEXT = rf'-?\d{{1,30}}(?![\d.eE])|"(?:[^"\\]|\\.){{0,{_ID_TEXT_MAX}}}"'
_KEY_END = re.compile(r"\s*:")
_ID_VALUE = re.compile(rf"\s*({_ID_TEXT})")
_TRAILING_ID = re.compile(rf'[{{,]\s*"id"\s*:\s*({_ID_TEXT})\s*\}}\s*$')


def top_level_id(text: str) -> RequestId | None:
    """The ``id`` member of the object ``text`` begins, read without parsing the rest (which may be malformed,
    cut short or nested past any parser): keys nested deeper are skipped, strings are skipped whole."""
    depth = 0
    position = 0
    while True:
        found = _STRUCTURE.search(text, position)
        if found is None:
            return None
        start = found.start()
        match found.group():
            case '"':
                end = _string_end(text, start)
                if end < 0:
                    return None
                key_end = _KEY_END.match(text, end) if depth == 1 else None
                if key_end is not None and text[start:end] == '"id"':
                    return _id_value(text, key_end.end())
                position = end
            case "{" | "[":
                depth += 1
                position = start + 1
            case _:
                depth -= 1
                if depth <= 0:
                    return None
                position = start + 1


def trailing_id(text: str) -> RequestId | None:
    """The ``id`` member that closes an object at the end of ``text`` (``..., "id": 7}``), as servers that
    write the result first do."""
    found = _TRAILING_ID.search(text)
    return _parsed_id(found.group(1)) if found is not None else None


def _string_end(text: str, start: int) -> int:
    """The index just after the string that opens at ``start``; -1 if it does not end in ``text``."""
    position = start + 1
    while True:
        found = _STRING_END.search(text, position)
        if found is None:
            return -1
        if found.group() == "\\":
            position = found.start() + 2
            continue
        return found.start() + 1


def _id_value(text: str, position: int) -> RequestId | None:
    found = _ID_VALUE.match(text, position)
    return _parsed_id(found.group(1)) if found is not None else None


def _parsed_id(text: str) -> RequestId | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if _is_id(value) else None

"""Reading a stdio server's lines: each answer reaches its request at once, as a message or as the fault that
fails it; a line that answers nothing is dropped; a line of any length is never held whole."""

from __future__ import annotations

import json

import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from actors.calls.mcp.answers import (
    Faulted,
    Ignored,
    Unattributed,
    fault,
    fault_message,
    oversized,
    read_line,
    top_level_id,
    trailing_id,
)
from actors.calls.mcp.stdio_transport import LineFramer, Oversized


def line(**message: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", **message}).encode()


def test_a_response_is_a_message_for_the_session() -> None:
    reading = read_line(line(id=3, result={"content": []}))

    assert isinstance(reading, SessionMessage)
    assert reading.message == types.JSONRPCResponse(jsonrpc="2.0", id=3, result={"content": []})


def test_an_error_and_a_servers_request_are_messages_too() -> None:
    error = read_line(line(id="a", error={"code": -32000, "message": "server error"}))
    request = read_line(line(id=9, method="ping"))

    assert isinstance(error, SessionMessage)
    assert isinstance(error.message, types.JSONRPCError)
    assert error.message.error.code == -32000
    assert isinstance(request, SessionMessage)
    assert isinstance(request.message, types.JSONRPCRequest)


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        ({"result": [1, 2]}, "the answer's result is an array, not an object"),
        ({"result": "done"}, "the answer's result is a string, not an object"),
        ({"result": None}, "the answer's result is null, not an object"),
        ({}, "the answer has neither a result nor an error"),
        ({"result": {}, "error": {"code": 1, "message": "x"}}, "the answer has both a result and an error"),
        ({"error": "no"}, "the answer's error is a string, not an object"),
        (
            {"error": {"message": "no code"}},
            "the answer's error is not a JSON-RPC error object (1 problem(s))",
        ),
    ],
)
def test_a_response_that_is_not_json_rpc_fails_its_request_as_malformed(
    member: dict[str, object], problem: str
) -> None:
    reading = read_line(line(id=7, **member))

    assert reading == Faulted(7, fault("MALFORMED_ANSWER", problem))


def test_a_response_without_json_rpc_2_is_malformed() -> None:
    reading = read_line(json.dumps({"id": 7, "result": {}}).encode())

    assert isinstance(reading, Faulted)
    assert reading.problem.error.code == "MALFORMED_ANSWER"


def test_an_integer_too_long_to_record_fails_its_request_as_unstorable() -> None:
    reading = read_line(b'{"jsonrpc":"2.0","id":4,"result":{"n":' + b"7" * 5000 + b"}}")

    assert isinstance(reading, Faulted)
    assert (reading.request_id, reading.problem.error.code) == (4, "OUTPUT_UNSTORABLE")
    assert "5,000 digits" in reading.problem.error.message


def test_an_answer_nested_past_the_parser_fails_its_request_as_a_parse_error() -> None:
    reading = read_line(b'{"jsonrpc":"2.0","id":5,"result":' + b"[" * 5000 + b"]" * 5000 + b"}")

    assert reading == Faulted(5, fault("JSONRPC_-32700", "the answer nests too deep to parse"))


def test_json_that_breaks_off_fails_the_request_it_names_without_repeating_its_text() -> None:
    reading = read_line(b'{"jsonrpc":"2.0","id":6,"result":{"text":"secret-ish" oops')

    assert isinstance(reading, Faulted)
    assert (reading.request_id, reading.problem.error.code) == (6, "JSONRPC_-32700")
    assert "secret-ish" not in reading.problem.error.message


@pytest.mark.parametrize("text", [b"hello from the server", b"", b"[1, 2]", b"42"])
def test_a_line_that_names_no_request_is_ignored(text: bytes) -> None:
    assert isinstance(read_line(text), Ignored)


def test_a_response_with_no_usable_id_answers_someone_but_nobody_can_tell_whom() -> None:
    assert isinstance(read_line(line(id=None, result={})), Unattributed)
    assert isinstance(read_line(line(id=True, result={})), Unattributed)


def test_the_id_is_found_at_the_top_level_only_skipping_strings_and_nested_objects() -> None:
    prefix = '{"result": {"id": 1, "text": "\\"id\\": 2"}, "items": [{"id": 3}], "id": "real"'

    assert top_level_id(prefix) == "real"
    assert top_level_id('{"jsonrpc": "2.0", "id" : -12, "result": {') == -12
    assert top_level_id('{"jsonrpc": "2.0", "id": 1.5}') is None
    assert top_level_id('{"result": {"id": 1}') is None
    assert top_level_id("[1, 2]") is None


def test_an_id_written_last_is_found_in_the_tail() -> None:
    assert trailing_id('..."x"}, "jsonrpc": "2.0", "id": 42}') == 42
    assert trailing_id('...{"a": {"id": 1}}') is None


def test_an_over_long_line_fails_the_request_named_at_its_start_or_its_end() -> None:
    head = b'{"jsonrpc":"2.0","id":11,"result":{"content":[{"type":"text","text":"xxxx'
    tail = b'xxxx"}]},"jsonrpc":"2.0","id":12}'

    assert oversized(head, b"xxxx", 10**8, 1000) == Faulted(
        11,
        fault(
            "OUTPUT_TOO_LARGE",
            "the answer is larger than the 1,000 bytes read from this server (at least 100,000,000)",
        ),
    )
    assert isinstance(oversized(b'{"result":{"content":[', tail, 10**8, 1000), Faulted)
    assert isinstance(oversized(b"xxxx", b"xxxx", 10**8, 1000), Unattributed)


def test_a_fault_reaches_the_session_as_an_error_carrying_the_fault_itself() -> None:
    problem = fault("MALFORMED_ANSWER", "no")

    message = fault_message(8, problem).message

    assert isinstance(message, types.JSONRPCError)
    assert message.id == 8
    assert message.error.data is problem  # an object no server can send


def test_the_framer_splits_lines_across_chunks_and_drops_a_carriage_return() -> None:
    framer = LineFramer(limit=100)

    assert framer.feed(b'{"a":') == []
    assert framer.feed(b'1}\r\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert framer.feed(b":3}\n") == [b'{"c":3}']


def test_the_framer_reports_an_over_long_line_by_its_ends_and_reads_on() -> None:
    framer = LineFramer(limit=10)

    assert framer.feed(b"start-" + b"x" * 100) == []
    assert framer.feed(b"y" * 100_000 + b"-end\nnext\n") == [
        Oversized(
            prefix=b"start-" + b"x" * 100, tail=(b"x" * 100 + b"y" * 100_000 + b"-end")[-65536:], size=100_110
        ),
        b"next",
    ]

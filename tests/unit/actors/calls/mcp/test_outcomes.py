"""How the MCP SDK's own refusals of a result become outcomes: its output-schema check is a protocol error; a
call its connection's end cut off is a lost connection, whatever error the session raised for it, and a
server's own error answered before the end is its answer."""

from __future__ import annotations

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR

from actors.calls.mcp.outcomes import classify_exception, classify_failure
from actors.calls.mcp.watch import CallWatch, Link
from dag.events import ErrorKind


@pytest.mark.parametrize(
    "wording",
    [
        "Invalid structured content returned by tool get-sum: 'x' is not of type 'number'",
        "Tool get-sum has an output schema but did not return structured content",
    ],
)
def test_the_sdks_output_schema_refusal_is_an_output_schema_mismatch(wording: str) -> None:
    error = classify_exception(RuntimeError(wording))

    assert (error.kind, error.code) == (ErrorKind.PROTOCOL, "OUTPUT_SCHEMA_MISMATCH")
    assert "'x'" not in error.message  # the SDK's text may echo the output: it is not recorded


def test_any_other_runtime_error_is_an_unknown_effect_recorded_by_type_only() -> None:
    error = classify_exception(RuntimeError("secret-looking detail"))

    assert (error.kind, error.code, error.message) == (
        ErrorKind.UNKNOWN_EFFECT,
        "UNEXPECTED_ERROR",
        "RuntimeError",
    )


# --- a lost connection is what the transport saw of the call, never a code ------------------------------------


@pytest.mark.parametrize("code", [CONNECTION_CLOSED, INTERNAL_ERROR, 0])
def test_a_call_waiting_when_its_connection_ended_is_a_lost_connection_whatever_the_session_raised(
    code: int,
) -> None:
    link, watch = Link(), CallWatch()
    assert link.sending(7, watch)

    link.lose()  # the transport saw the connection end, then the session failed the call its own way
    error = classify_failure(MCPError(code=code, message="Connection closed"), watch)

    assert (error.kind, error.code) == (ErrorKind.TRANSIENT, "CONNECTION_FAILED")
    assert link.ended.is_set()


def test_a_servers_own_error_32000_answered_before_the_connection_ended_is_its_answer() -> None:
    link, watch = Link(), CallWatch()
    link.sending(7, watch)

    link.settled("7")  # its answer (the id echoed as text) was read, then the server went away
    link.lose()
    error = classify_failure(MCPError(code=CONNECTION_CLOSED, message="Connection closed"), watch)

    assert (error.kind, error.code, error.message) == (
        ErrorKind.PROTOCOL,
        "JSONRPC_-32000",
        "Connection closed",
    )


def test_only_the_calls_waiting_on_the_connection_are_cut_off() -> None:
    link = Link()
    answered, waiting, elsewhere = CallWatch(), CallWatch(), CallWatch()
    link.sending(1, answered)
    link.sending(2, waiting)
    link.sending(3, None)  # a request of the session's own (a listing)
    link.settled(1)

    link.lose()

    assert (answered.cut_off, waiting.cut_off, elsewhere.cut_off) == (False, True, False)


def test_a_request_sent_once_the_connection_has_ended_is_refused_and_its_call_cut_off() -> None:
    link, watch = Link(), CallWatch()
    link.lose()

    assert not link.sending(9, watch)
    assert watch.cut_off

"""How a tool's ``isError`` answer is classified: a coded refusal is the tool's answer; anything without a
code is no answer at all (a protocol failure), so no verdict can rest on it."""

from __future__ import annotations

import json

import pytest
from mcp_types import CallToolResult, TextContent

from actors.calls.mcp.outcomes import classify_tool_error
from dag.events import ErrorKind


def result(text: str, structured: dict[str, object] | None = None) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=True
    )


def test_a_coded_refusal_is_the_tools_business_answer() -> None:
    payload = {"error": {"code": "DOCUMENT_NOT_FOUND", "message": "no such document"}}

    error = classify_tool_error(result(json.dumps(payload), payload))

    assert (error.kind, error.code) == (ErrorKind.BUSINESS, "DOCUMENT_NOT_FOUND")


def test_a_code_only_in_the_text_is_read_from_there() -> None:
    payload = {"error": {"code": "CASE_NOT_FOUND", "message": "no such case"}}

    assert classify_tool_error(result(json.dumps(payload))).code == "CASE_NOT_FOUND"


def test_upstream_unavailable_is_transient() -> None:
    payload = {"error": {"code": "UPSTREAM_UNAVAILABLE", "message": "retry later", "upstream": "database"}}

    error = classify_tool_error(result(json.dumps(payload), payload))

    assert (error.kind, error.code) == (ErrorKind.TRANSIENT, "UPSTREAM_UNAVAILABLE")


@pytest.mark.parametrize(
    "text",
    [
        "Error executing tool caseops_get_case_snapshot: connection was closed in the middle of operation",
        "CannotConnectNowError: the database system is starting up",
        "",
        '{"error": "not an object with a code"}',
    ],
)
def test_a_refusal_without_a_code_is_a_protocol_failure_never_a_business_answer(text: str) -> None:
    error = classify_tool_error(result(text))

    assert (error.kind, error.code) == (ErrorKind.PROTOCOL, "TOOL_ERROR_UNCODED")
    assert error.infrastructure

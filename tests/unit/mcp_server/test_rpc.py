"""The guard reads a request body once, and refuses any body the SDK might read differently."""

from __future__ import annotations

import json

import pytest

from mcp_server.rpc import INVALID_REQUEST, PARSE_ERROR, BodyRejected, Target, parse_target


def body(message: object) -> bytes:
    return json.dumps(message).encode()


def test_a_tool_call_names_its_tool() -> None:
    target = parse_target(
        body({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t", "arguments": {}}})
    )

    assert target == Target(method="tools/call", tool="t")


def test_a_resource_read_names_its_uri() -> None:
    target = parse_target(
        body({"jsonrpc": "2.0", "id": "a", "method": "resources/read", "params": {"uri": "u"}})
    )

    assert target == Target(method="resources/read", uri="u")


def test_other_methods_and_empty_bodies_name_nothing() -> None:
    assert parse_target(body({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})) == Target("tools/list")
    assert parse_target(b"") == Target(method=None)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", PARSE_ERROR),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "tools/call"}', PARSE_ERROR),
        (body([{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]), INVALID_REQUEST),
        (body({"jsonrpc": "2.0", "id": 1, "method": 5}), INVALID_REQUEST),
        (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 3}}), INVALID_REQUEST),
        (body({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}), INVALID_REQUEST),
        (body({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {}}), INVALID_REQUEST),
    ],
    ids=[
        "invalid-json",
        "duplicate-key",
        "batch",
        "method-not-string",
        "name-not-string",
        "no-params",
        "no-uri",
    ],
)
def test_ambiguous_bodies_are_refused(raw: bytes, code: int) -> None:
    with pytest.raises(BodyRejected) as rejected:
        parse_target(raw)

    assert rejected.value.code == code


def test_a_refusal_names_the_request_id_when_it_could_be_read() -> None:
    with pytest.raises(BodyRejected) as rejected:
        parse_target(body({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {}}))

    assert rejected.value.request_id == 9


def test_duplicate_keys_deep_inside_the_arguments_are_refused_too() -> None:
    raw = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "name": "u"}}'

    with pytest.raises(BodyRejected):
        parse_target(raw)

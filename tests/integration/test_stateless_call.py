"""The tool server's direct answer to a plain 2026-07-28 ``tools/call`` equals the SDK's, over real HTTP.

Two servers on one database and one token audience: one answers plain calls itself
(``mcp_server.stateless_call``), the other sends every request through the SDK. Every request, plain or not,
well-formed or not, goes to both with a fresh token each, and the answers must be equal: status, content
type and JSON. The direct path's counter says which requests it took, so the test also fails if it stopped
taking the plain ones (and the comparison became the SDK against itself).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server.contracts import CASEOPS_TOOLS
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_server import MODERN, serving

AUDIENCE = "http://stateless-call.test/mcp"
SNAPSHOT = "caseops_get_case_snapshot"
RESOLVE = "caseops_resolve_document_alias"


@dataclass
class Request:
    """One POST: its JSON body (or raw bytes) and headers; ``tool`` is whose token it carries."""

    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    tool: str = SNAPSHOT


def plain(tool: str = SNAPSHOT, arguments: Any = None, request_id: Any = 7) -> Request:
    """A call as raydag's client sends it."""
    args = {"case_id": "C-102"} if arguments is None else arguments
    return Request(
        body={
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": args,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        },
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        },
        tool=tool,
    )


def changed(request: Request, change: Callable[[dict[str, Any], dict[str, str]], None]) -> Request:
    body = json.loads(json.dumps(request.body))
    headers = dict(request.headers)
    change(body, headers)
    return Request(body, headers, request.tool)


def _meta(body: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = body["params"]["_meta"]
    return meta


@pytest.fixture(scope="module")
def pair(dsn: str, token_key: bytes) -> Iterator[tuple[RunningToolServer, RunningToolServer]]:
    with (
        serving(dsn, token_key, audience=AUDIENCE) as direct,
        serving(dsn, token_key, audience=AUDIENCE, direct_calls=False) as sdk,
    ):
        yield direct, sdk


def answer(server: RunningToolServer, request: Request) -> tuple[int, str, Any]:
    token = server.token(request.tool) if request.tool in CASEOPS_TOOLS else server.token(SNAPSHOT)
    content = json.dumps(request.body).encode()
    response = httpx.post(
        server.url,
        content=content,
        headers={**request.headers, "Authorization": f"Bearer {token}"},
        timeout=10,
    )
    kind = response.headers.get("content-type", "")
    body = response.json() if kind.startswith("application/json") and response.content else response.text
    return response.status_code, kind, body


def same_answer(pair: tuple[RunningToolServer, RunningToolServer], request: Request) -> bool:
    """Whether both servers answer ``request`` alike; ``True`` if the direct path took it."""
    direct, sdk = pair
    before = direct.server.direct_answers
    ours = answer(direct, request)
    theirs = answer(sdk, request)
    assert ours == theirs, (json.dumps(request.body), request.headers)
    assert sdk.server.direct_answers == 0
    return direct.server.direct_answers == before + 1


TAKEN = {
    "a case snapshot": plain(),
    "another tool": plain(RESOLVE, {"case_id": "C-102", "document_id": "DOC-7"}),
    "a string id": plain(request_id="call-1"),
    "a case the token is not bound to": plain(arguments={"case_id": "C-999"}),
    "arguments the input model refuses": plain(arguments={"case_id": 12}),
    "an argument the input model does not know": plain(arguments={"case_id": "C-102", "extra": True}),
    "no arguments at all": changed(plain(), lambda body, _: body["params"].pop("arguments")),
    "no client info": changed(plain(), lambda body, _: _meta(body).pop("io.modelcontextprotocol/clientInfo")),
    "Accept: */*": changed(plain(), lambda _, headers: headers.update(Accept="*/*")),
    "Accept: application/json only": changed(plain(), lambda _, h: h.update(Accept="application/json")),
    "a charset on the content type": changed(
        plain(), lambda _, headers: headers.update({"Content-Type": "application/json; charset=utf-8"})
    ),
}

PASSED_ON = {
    "an unknown tool": plain("caseops_delete_everything"),
    "a notification": changed(plain(), lambda body, _: body.pop("id")),
    "a boolean id": plain(request_id=True),
    "a null id": plain(request_id=None),
    "a float id": plain(request_id=1.5),
    "jsonrpc 1.0": changed(plain(), lambda body, _: body.update(jsonrpc="1.0")),
    "an extra envelope member": changed(plain(), lambda body, _: body.update(extra=1)),
    "null arguments": changed(plain(), lambda body, _: body["params"].update(arguments=None)),
    "arguments as a list": plain(arguments=["C-102"]),
    "request state": changed(plain(), lambda body, _: body["params"].update(requestState="opaque")),
    "a task field": changed(plain(), lambda body, _: body["params"].update(task={"ttl": 1000})),
    "Mcp-Name of another tool": changed(plain(), lambda _, headers: headers.update({"Mcp-Name": RESOLVE})),
    "Mcp-Method of another method": changed(
        plain(), lambda _, headers: headers.update({"Mcp-Method": "tools/list"})
    ),
    "no Mcp-Name": changed(plain(), lambda _, headers: headers.pop("Mcp-Name")),
    "a header version that differs from the body's": changed(
        plain(), lambda body, _: _meta(body).update({"io.modelcontextprotocol/protocolVersion": "2099-01-01"})
    ),
    "an unsupported version in both": changed(
        changed(plain(), lambda _, headers: headers.update({"MCP-Protocol-Version": "2099-01-01"})),
        lambda body, _: _meta(body).update({"io.modelcontextprotocol/protocolVersion": "2099-01-01"}),
    ),
    "no client capabilities": changed(
        plain(), lambda body, _: _meta(body).pop("io.modelcontextprotocol/clientCapabilities")
    ),
    "client info of the wrong shape": changed(
        plain(), lambda body, _: _meta(body).update({"io.modelcontextprotocol/clientInfo": "me"})
    ),
    "a null progress token": changed(plain(), lambda body, _: _meta(body).update(progressToken=None)),
    "no _meta": changed(plain(), lambda body, _: body["params"].pop("_meta")),
    "Accept: text/event-stream only": changed(plain(), lambda _, h: h.update(Accept="text/event-stream")),
    "a text/plain body": changed(plain(), lambda _, headers: headers.update({"Content-Type": "text/plain"})),
    "an Mcp-Param header": changed(
        plain(), lambda _, headers: headers.update({"Mcp-Param-Case-Id": "C-102"})
    ),
    "the handshake era": changed(
        plain(), lambda _, headers: headers.update({"MCP-Protocol-Version": "2025-11-25"})
    ),
}


@pytest.mark.parametrize("name", list(TAKEN))
def test_a_plain_call_is_answered_directly_and_as_the_sdk_answers_it(
    pair: tuple[RunningToolServer, RunningToolServer], name: str
) -> None:
    assert same_answer(pair, TAKEN[name]) is True


@pytest.mark.parametrize("name", list(PASSED_ON))
def test_any_other_request_goes_to_the_sdk(
    pair: tuple[RunningToolServer, RunningToolServer], name: str
) -> None:
    assert same_answer(pair, PASSED_ON[name]) is False


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda children: (
        st.lists(children, max_size=2) | st.dictionaries(st.text(max_size=4), children, max_size=2)
    ),
    max_leaves=4,
)
_PLACES = st.sampled_from(
    [
        ("body", "id"),
        ("body", "jsonrpc"),
        ("body", "method"),
        ("params", "name"),
        ("params", "arguments"),
        ("params", "_meta"),
        ("params", "cursor"),
        ("arguments", "case_id"),
        ("arguments", "document_id"),
        ("meta", "io.modelcontextprotocol/protocolVersion"),
        ("meta", "io.modelcontextprotocol/clientCapabilities"),
        ("meta", "io.modelcontextprotocol/clientInfo"),
        ("meta", "progressToken"),
        ("headers", "MCP-Protocol-Version"),
        ("headers", "Mcp-Name"),
        ("headers", "Mcp-Method"),
        ("headers", "Accept"),
    ]
)
_VALUES = st.one_of(
    _JSON,
    st.sampled_from(
        [MODERN, "2025-11-25", "tools/call", SNAPSHOT, RESOLVE, "C-102", "*/*", "application/json"]
    ),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(_PLACES, st.booleans(), _VALUES), min_size=1, max_size=3))
def test_a_call_changed_anywhere_gets_the_same_answer_from_both(
    pair: tuple[RunningToolServer, RunningToolServer], edits: list[tuple[tuple[str, str], bool, Any]]
) -> None:
    request = plain()
    for (place, key), remove, value in edits:

        def edit(
            body: dict[str, Any],
            headers: dict[str, str],
            place: str = place,
            key: str = key,
            remove: bool = remove,
            value: Any = value,
        ) -> None:
            target: Any = {
                "body": body,
                "params": body.get("params"),
                "arguments": (body.get("params") or {}).get("arguments")
                if isinstance(body.get("params"), dict)
                else None,
                "meta": (body.get("params") or {}).get("_meta")
                if isinstance(body.get("params"), dict)
                else None,
                "headers": headers,
            }[place]
            if not isinstance(target, dict):
                return
            if remove:
                target.pop(key, None)
            elif place == "headers":
                target[key] = (
                    value if isinstance(value, str) and value.isascii() and value.isprintable() else "x"
                )
            else:
                target[key] = value

        request = changed(request, edit)
    same_answer(pair, request)

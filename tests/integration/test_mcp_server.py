"""The caseops MCP server over real HTTP, through the SDK's client, in both protocol eras on one endpoint.

Also the wire helpers the other ``test_mcp_*`` modules share: raw JSON-RPC requests in either era.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from actors.launch.background_server import BackgroundServer
from dag.contracts import Risk
from dag.tokens import RESOURCE_READER, TaskTokens
from mcp_server.auth import ASGIApp
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import CASEOPS_TOOLS, SCOPE_CASES, SCOPE_POLICIES
from mcp_server.server import MCP_PATH, ToolServer
from mcp_server.tools import ToolBinding
from tests.c102 import CASE_OUTPUT, RESOLVE_OUTPUT
from tests.integration.conftest import RunningToolServer

ERAS = ["2026-07-28", "legacy"]
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


@asynccontextmanager
async def connect(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    """An SDK client sending ``token``; the SDK does not close an HTTP client it was given, so this does."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@contextmanager
def serving(
    dsn: str,
    key: bytes,
    *,
    audience: str | None = None,
    port: int = 0,
    extra_tools: Sequence[ToolBinding] = (),
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    **options: Any,
) -> Iterator[RunningToolServer]:
    """A tool server of its own on loopback, configured with ``options``; its tokens are for ``audience``
    (default: its own URL), and ``wrap`` may put a recorder in front of it."""
    http = BackgroundServer(host="127.0.0.1", port=port)
    url = http.url + MCP_PATH
    tokens = TaskTokens(key=key, audience=audience or url)
    server = ToolServer(ToolServerConfig(dsn=dsn, tokens=tokens, **options), extra_tools)
    if wrap is not None:
        server.asgi = wrap(server.asgi)
    http.start(server.asgi_app())
    try:
        yield RunningToolServer(url, server, tokens)
    finally:
        http.stop()


def rpc(
    url: str,
    token: str | None,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    era: str = MODERN,
    headers: dict[str, str] | None = None,
    request_id: int | None = 1,
) -> httpx.Response:
    """One raw JSON-RPC request as a client of ``era`` sends it (2026-07-28: routing headers and ``_meta``)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": dict(params or {})}
    if request_id is not None:
        body["id"] = request_id
    sent = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if era == MODERN:
        body["params"]["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        sent.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
        name = body["params"].get("name") or body["params"].get("uri")
        if name is not None:
            sent["Mcp-Name"] = name
    elif method != "initialize":
        sent["MCP-Protocol-Version"] = era
    sent.update(headers or {})
    return httpx.post(url, headers=sent, content=json.dumps(body), timeout=10)


def reader_token(
    server: RunningToolServer,
    *,
    case: str = "C-102",
    tenant: str = "tenant-demo",
    scopes: frozenset[str] = frozenset({"cases:read", "policies:read", "documents:read"}),
) -> str:
    """A token that reads ``case``'s evidence resources and calls no tool."""
    return server.tokens.mint(
        subject="auditor",
        tenant_id=tenant,
        task_id="audit",
        resource={"case_id": case},
        tool=RESOURCE_READER,
        scopes=scopes,
    )


def error_of(result: Any) -> dict[str, Any]:
    """The ``{"code", "message"}`` of an ``isError`` tool result, checked to agree between its two forms."""
    assert result.is_error is True
    structured = result.structured_content["error"]
    assert json.loads(result.content[0].text) == {"error": structured}
    return dict(structured)


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_publishes_every_contract_with_strict_schemas_and_honest_hints(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), mode) as client:
        assert client.protocol_version == (MODERN if mode != "legacy" else LEGACY)
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(listed) == set(CASEOPS_TOOLS)
    for name, tool in listed.items():
        assert tool.input_schema["additionalProperties"] is False
        fields = CASEOPS_TOOLS[name].input_model.model_fields
        assert tool.input_schema["required"] == [
            field for field, info in fields.items() if info.is_required()
        ]
        assert set(tool.input_schema["properties"]) == set(fields)
        assert tool.input_schema["properties"]["case_id"]["pattern"].startswith("^")
        assert tool.input_schema["properties"]["case_id"]["maxLength"] == 64
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        assert tool.annotations is not None
        risk = CASEOPS_TOOLS[name].risk
        assert tool.annotations.read_only_hint is (risk is Risk.READ_ONLY)
        assert tool.annotations.destructive_hint is (risk is Risk.IRREVERSIBLE_WRITE)
        assert tool.annotations.idempotent_hint is True  # a write with the same idempotency key acts once


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_call_returns_structured_output_with_evidence_refs(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), mode) as client:
        snapshot = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})
    async with connect(tool_server.url, tool_server.token("caseops_resolve_document_alias"), mode) as client:
        resolution = await client.call_tool(
            "caseops_resolve_document_alias", {"case_id": "C-102", "document_id": "DOC-C102-003"}
        )

    assert snapshot.is_error is False
    assert snapshot.structured_content == CASE_OUTPUT
    assert resolution.structured_content == RESOLVE_OUTPUT


def test_one_endpoint_answers_discover_without_a_session_and_initialize_with_one(
    tool_server: RunningToolServer,
) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    discovered = rpc(tool_server.url, token, "server/discover")
    initialized = rpc(
        tool_server.url,
        token,
        "initialize",
        {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}},
        era=LEGACY,
    )

    assert discovered.status_code == 200
    assert MODERN in discovered.json()["result"]["supportedVersions"]
    assert "mcp-session-id" not in discovered.headers
    assert initialized.status_code == 200
    assert initialized.json()["result"]["protocolVersion"] == LEGACY


@pytest.mark.parametrize("mode", ERAS)
async def test_another_tenants_case_answers_exactly_like_an_unknown_case(
    tool_server: RunningToolServer, mode: str
) -> None:
    foreign = tool_server.token("caseops_get_case_snapshot", tenant="tenant-other", case="C-102")
    unknown = tool_server.token("caseops_get_case_snapshot", tenant="tenant-demo", case="C-999")

    async with connect(tool_server.url, foreign, mode) as client:
        theirs = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})
    async with connect(tool_server.url, unknown, mode) as client:
        missing = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-999"})

    assert error_of(theirs)["code"] == "CASE_NOT_FOUND"
    assert theirs.content[0].text.replace("C-102", "X") == missing.content[0].text.replace("C-999", "X")


async def test_a_token_bound_to_one_case_cannot_read_another(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot", case="C-102")
    async with connect(tool_server.url, token, MODERN) as client:
        result = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-101"})

    assert error_of(result) == {"code": "CASE_NOT_FOUND", "message": "case 'C-101' was not found"}


async def test_a_token_minted_for_one_tool_cannot_call_another(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot", scopes=frozenset({SCOPE_CASES, SCOPE_POLICIES}))
    async with connect(tool_server.url, token, MODERN) as client:
        result = await client.call_tool("caseops_get_policy_requirements", {"case_id": "C-102"})

    assert error_of(result)["code"] == "TOKEN_NOT_FOR_TOOL"


@pytest.mark.parametrize("mode", ERAS)
async def test_unknown_arguments_such_as_a_tenant_are_invalid_arguments_naming_the_field(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), mode) as client:
        result = await client.call_tool(
            "caseops_get_case_snapshot", {"case_id": "C-102", "tenant_id": "tenant-other"}
        )

    error = error_of(result)
    assert error["code"] == "INVALID_ARGUMENTS"
    assert "tenant_id" in error["message"]
    assert "tenant-other" not in error["message"]  # the rejected value is not echoed


async def test_an_argument_outside_its_pattern_is_invalid_arguments(tool_server: RunningToolServer) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), MODERN) as client:
        result = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102; DROP TABLE cases"})

    error = error_of(result)
    assert error["code"] == "INVALID_ARGUMENTS"
    assert error["message"].startswith("invalid arguments for caseops_get_case_snapshot: case_id:")


@pytest.mark.parametrize("mode", ERAS)
async def test_an_unknown_tool_is_a_json_rpc_invalid_params_error(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), mode) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("caseops_delete_everything", {"case_id": "C-102"})

    assert raised.value.code == -32602
    assert raised.value.message == "Unknown tool: caseops_delete_everything"


def test_protocol_errors_are_json_rpc_errors_in_both_eras(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    modern = rpc(tool_server.url, token, "no/such/method")
    legacy = rpc(tool_server.url, token, "no/such/method", era=LEGACY)
    mismatch = rpc(
        tool_server.url,
        token,
        "tools/call",
        {"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}},
        headers={"Mcp-Name": "caseops_get_policy_requirements"},
    )

    assert modern.json()["error"]["code"] == -32601
    assert legacy.json()["error"]["code"] == -32601
    assert mismatch.status_code == 400
    assert mismatch.json()["error"]["code"] == -32020  # HeaderMismatch: Mcp-Name disagrees with the body


def test_list_results_carry_cache_hints_in_2026_mode_only(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    modern = rpc(tool_server.url, token, "tools/list").json()["result"]
    legacy = rpc(tool_server.url, token, "tools/list", era=LEGACY).json()["result"]

    assert (modern["ttlMs"], modern["cacheScope"]) == (300_000, "public")
    assert "ttlMs" not in legacy
    assert "cacheScope" not in legacy


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        (None, 'Bearer realm="raydag-mcp"'),
        ("Bearer not.a.jwt", 'Bearer realm="raydag-mcp", error="invalid_token"'),
    ],
    ids=["missing", "garbage"],
)
def test_requests_without_a_valid_task_token_are_401(
    tool_server: RunningToolServer, authorization: str | None, challenge: str
) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    response = httpx.post(
        tool_server.url, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=10
    )

    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith(challenge)


def test_a_token_for_another_audience_is_401(tool_server: RunningToolServer) -> None:
    from dag.tokens import TaskTokens

    elsewhere = TaskTokens(key=tool_server.tokens.key, audience="http://elsewhere.example/mcp")
    token = elsewhere.mint(
        subject="s",
        tenant_id="tenant-demo",
        task_id="t",
        resource={"case_id": "C-102"},
        tool="caseops_get_case_snapshot",
        scopes={SCOPE_CASES},
    )
    response = rpc(tool_server.url, token, "tools/list")

    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


def test_a_token_living_longer_than_the_lifetime_is_401(tool_server: RunningToolServer) -> None:
    from dag.tokens import TaskTokens

    long_lived = TaskTokens(key=tool_server.tokens.key, audience=tool_server.url, lifetime_seconds=3600)
    token = long_lived.mint(
        subject="s",
        tenant_id="tenant-demo",
        task_id="t",
        resource={"case_id": "C-102"},
        tool="caseops_get_case_snapshot",
        scopes={SCOPE_CASES},
    )
    response = rpc(tool_server.url, token, "tools/list")

    assert response.status_code == 401
    assert "lives longer than 60 s" in response.json()["error_description"]


async def test_the_serve_app_serves_mcp_at_slash_mcp(api: str, tool_server: RunningToolServer) -> None:
    from dag.tokens import TaskTokens

    url = api + "/mcp"
    token = TaskTokens(key=tool_server.tokens.key, audience=tool_server.url).mint(
        subject="s",
        tenant_id="tenant-demo",
        task_id="t",
        resource={"case_id": "C-102"},
        tool="caseops_get_case_snapshot",
        scopes={SCOPE_CASES},
    )
    # The app was configured with the session tool server's URL as its MCP audience.
    async with connect(url, token, MODERN) as client:
        listed = await client.list_tools()
        snapshot = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})

    assert {tool.name for tool in listed.tools} == set(CASEOPS_TOOLS)
    assert snapshot.structured_content is not None
    assert snapshot.structured_content["evidence_ref"] == "case://C-102@7"

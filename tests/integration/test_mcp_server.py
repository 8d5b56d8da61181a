"""The caseops MCP server over real HTTP, through the SDK's client, in both protocol eras."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_server.contracts import CASEOPS_TOOLS, SCOPE_CASES, SCOPE_POLICIES
from tests.c102 import CASE_OUTPUT, RESOLVE_OUTPUT
from tests.integration.conftest import RunningToolServer

ERAS = ["2026-07-28", "legacy"]


@asynccontextmanager
async def connect(url: str, token: str, mode: str) -> AsyncIterator[Client]:
    """An SDK client sending ``token``; the SDK does not close an HTTP client it was given, so this does."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_list_publishes_the_four_contracts_with_strict_schemas(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, tool_server.token("caseops_get_case_snapshot"), mode) as client:
        assert client.protocol_version == ("2026-07-28" if mode != "legacy" else "2025-11-25")
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}

    assert set(listed) == set(CASEOPS_TOOLS)
    for name, tool in listed.items():
        assert tool.input_schema["additionalProperties"] is False
        assert tool.input_schema["required"] == list(CASEOPS_TOOLS[name].input_model.model_fields)
        assert tool.output_schema is not None
        assert tool.output_schema["type"] == "object"
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.idempotent_hint is True


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


async def test_another_tenants_case_answers_exactly_like_an_unknown_case(
    tool_server: RunningToolServer,
) -> None:
    foreign = tool_server.token("caseops_get_case_snapshot", tenant="tenant-other", case="C-102")
    unknown = tool_server.token("caseops_get_case_snapshot", tenant="tenant-demo", case="C-999")

    async with connect(tool_server.url, foreign, "2026-07-28") as client:
        theirs = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})
    async with connect(tool_server.url, unknown, "2026-07-28") as client:
        missing = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-999"})

    assert theirs.is_error is True
    assert theirs.content[0].text.replace("C-102", "X") == missing.content[0].text.replace("C-999", "X")
    assert '"code":"CASE_NOT_FOUND"' in theirs.content[0].text


async def test_a_token_bound_to_one_case_cannot_read_another(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot", case="C-102")
    async with connect(tool_server.url, token, "2026-07-28") as client:
        result = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-101"})

    assert result.is_error is True
    assert '"code":"CASE_NOT_FOUND"' in result.content[0].text


async def test_a_token_without_the_tools_scope_is_refused(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_policy_requirements", scopes=frozenset({SCOPE_CASES}))
    async with connect(tool_server.url, token, "2026-07-28") as client:
        result = await client.call_tool("caseops_get_policy_requirements", {"case_id": "C-102"})

    assert result.is_error is True
    assert '"code":"INSUFFICIENT_SCOPE"' in result.content[0].text


async def test_a_token_minted_for_one_tool_cannot_call_another(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot", scopes=frozenset({SCOPE_CASES, SCOPE_POLICIES}))
    async with connect(tool_server.url, token, "2026-07-28") as client:
        result = await client.call_tool("caseops_get_policy_requirements", {"case_id": "C-102"})

    assert result.is_error is True
    assert '"code":"TOKEN_NOT_FOR_TOOL"' in result.content[0].text


async def test_unknown_arguments_such_as_a_tenant_are_rejected(tool_server: RunningToolServer) -> None:
    async with connect(
        tool_server.url, tool_server.token("caseops_get_case_snapshot"), "2026-07-28"
    ) as client:
        result = await client.call_tool(
            "caseops_get_case_snapshot", {"case_id": "C-102", "tenant_id": "tenant-other"}
        )

    assert result.is_error is True
    assert "tenant_id" in result.content[0].text


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
    from mcp_server.tokens import TaskTokens

    elsewhere = TaskTokens(key=tool_server.tokens.key, audience="http://elsewhere.example/mcp")
    token = elsewhere.mint(
        subject="s",
        tenant_id="tenant-demo",
        task_id="t",
        case_id="C-102",
        tool="caseops_get_case_snapshot",
        scopes={SCOPE_CASES},
    )
    response = httpx.post(
        tool_server.url,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        timeout=10,
    )

    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_the_serve_app_serves_mcp_at_slash_mcp(api: str, tool_server: RunningToolServer) -> None:
    from mcp_server.tokens import TaskTokens

    url = api + "/mcp"
    token = TaskTokens(key=tool_server.tokens.key, audience=tool_server.url).mint(
        subject="s",
        tenant_id="tenant-demo",
        task_id="t",
        case_id="C-102",
        tool="caseops_get_case_snapshot",
        scopes={SCOPE_CASES},
    )
    # The app was configured with the session tool server's URL as its MCP audience.
    async with connect(url, token, "2026-07-28") as client:
        listed = await client.list_tools()
        snapshot = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})

    assert {tool.name for tool in listed.tools} == set(CASEOPS_TOOLS)
    assert snapshot.structured_content is not None
    assert snapshot.structured_content["evidence_ref"] == "case://C-102@7"

"""Evidence refs resolve: ``case://``, ``policy://`` and ``evidence://`` resources over real HTTP, in both eras,
readable with a ``resources/read`` token under the same tenant and case rules as the tools."""

from __future__ import annotations

import json

import pytest
from mcp.shared.exceptions import MCPError

from mcp_server.contracts import SCOPE_CASES, SCOPE_POLICIES
from tests.c102 import CASE_OUTPUT, POLICY_OUTPUT
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_server import ERAS, LEGACY, MODERN, connect, reader_token, rpc

POLICY_URI = "policy://motor-claim-standard@2026.1"
DOCUMENT_URI = "evidence://C-102/DOC-C102-003@1"


@pytest.mark.parametrize("mode", ERAS)
async def test_the_three_evidence_templates_are_listed(tool_server: RunningToolServer, mode: str) -> None:
    async with connect(tool_server.url, reader_token(tool_server), mode) as client:
        templates = (await client.list_resource_templates()).resource_templates

    assert {template.uri_template for template in templates} == {
        "case://{case_id}@{version}",
        "policy://{policy_id}@{version}",
        "evidence://{case_id}/{document_id}@{version}",
    }
    assert {template.mime_type for template in templates} == {"application/json"}


@pytest.mark.parametrize("mode", ERAS)
async def test_a_reader_token_resolves_the_evidence_refs_a_run_cites(
    tool_server: RunningToolServer, mode: str
) -> None:
    async with connect(tool_server.url, reader_token(tool_server), mode) as client:
        case = await client.read_resource(CASE_OUTPUT["evidence_ref"])
        policy = await client.read_resource(POLICY_URI)
        document = await client.read_resource(DOCUMENT_URI)

    assert json.loads(case.contents[0].text) == CASE_OUTPUT
    policy_output = {key: value for key, value in POLICY_OUTPUT.items() if key != "case_id"}
    assert json.loads(policy.contents[0].text) == policy_output
    assert json.loads(document.contents[0].text) == {
        "case_id": "C-102",
        "document_id": "DOC-C102-003",
        "source_label": "道路交通事故認定書",
        "canonical_code": None,
        "captured_at": "2026-07-19T11:02:00+08:00",
        "source_ref": DOCUMENT_URI,
    }


def test_reads_and_lists_carry_cache_hints_in_2026_mode(tool_server: RunningToolServer) -> None:
    token = reader_token(tool_server)
    read = rpc(tool_server.url, token, "resources/read", {"uri": POLICY_URI}).json()["result"]
    listed = rpc(tool_server.url, token, "resources/list").json()["result"]
    templates = rpc(tool_server.url, token, "resources/templates/list").json()["result"]
    legacy = rpc(tool_server.url, token, "resources/read", {"uri": POLICY_URI}, era=LEGACY).json()["result"]

    assert (read["ttlMs"], read["cacheScope"]) == (300_000, "private")
    assert (listed["ttlMs"], listed["cacheScope"]) == (30_000, "private")
    assert (templates["ttlMs"], templates["cacheScope"]) == (300_000, "public")
    assert "ttlMs" not in legacy


async def test_resources_list_shows_the_tokens_case_within_its_scopes(tool_server: RunningToolServer) -> None:
    everything = reader_token(tool_server)
    cases_only = reader_token(tool_server, scopes=frozenset({SCOPE_CASES}))
    async with connect(tool_server.url, everything, MODERN) as client:
        listed = [str(resource.uri) for resource in (await client.list_resources()).resources]
    async with connect(tool_server.url, cases_only, MODERN) as client:
        narrow = [str(resource.uri) for resource in (await client.list_resources()).resources]

    assert listed == [
        "case://C-102@7",
        POLICY_URI,
        "evidence://C-102/DOC-C102-001@1",
        "evidence://C-102/DOC-C102-002@1",
        DOCUMENT_URI,
    ]
    assert narrow == ["case://C-102@7"]


async def _not_found_message(server: RunningToolServer, token: str, uri: str) -> str:
    async with connect(server.url, token, MODERN) as client:
        with pytest.raises(MCPError) as raised:
            await client.read_resource(uri)
    assert raised.value.code == -32602
    return raised.value.message.replace(uri, "URI")


@pytest.mark.parametrize(
    ("tenant", "case", "uri"),
    [
        ("tenant-other", "C-102", "case://C-102@7"),  # another tenant's case
        ("tenant-demo", "C-102", "case://C-101@3"),  # another case than the token's
        ("tenant-demo", "C-102", "case://C-102@6"),  # a version never recorded
        ("tenant-demo", "C-102", "policy://home-claim-basic@2026.1"),  # another tenant's policy
        ("tenant-demo", "C-102", "evidence://C-201/DOC-C201-002@1"),  # another tenant's document
        ("tenant-demo", "C-102", "evidence://C-102/DOC-C102-003@2"),  # a version that does not exist
    ],
    ids=["tenant", "case", "case-version", "policy", "document", "document-version"],
)
async def test_what_a_token_may_not_read_answers_exactly_like_what_does_not_exist(
    tool_server: RunningToolServer, tenant: str, case: str, uri: str
) -> None:
    hidden = await _not_found_message(tool_server, reader_token(tool_server, tenant=tenant, case=case), uri)
    missing = await _not_found_message(tool_server, reader_token(tool_server, case="C-999"), "case://C-999@1")

    assert hidden == missing == "resource URI was not found"


def test_a_tool_call_token_cannot_read_resources(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    response = rpc(tool_server.url, token, "resources/read", {"uri": "case://C-102@7"})

    assert response.status_code == 403
    assert response.headers["www-authenticate"].startswith(
        'Bearer error="insufficient_scope", scope="cases:read"'
    )


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_read_outside_the_tokens_scopes_is_403_insufficient_scope(
    tool_server: RunningToolServer, era: str
) -> None:
    token = reader_token(tool_server, scopes=frozenset({SCOPE_CASES, SCOPE_POLICIES}))
    response = rpc(tool_server.url, token, "resources/read", {"uri": DOCUMENT_URI}, era=era)

    assert response.status_code == 403
    assert response.headers["www-authenticate"].startswith(
        'Bearer error="insufficient_scope", scope="documents:read"'
    )


def test_a_reader_token_reads_more_than_once(tool_server: RunningToolServer) -> None:
    token = reader_token(tool_server)
    first = rpc(tool_server.url, token, "resources/read", {"uri": "case://C-102@7"})
    second = rpc(tool_server.url, token, "resources/read", {"uri": "case://C-102@7"})

    assert first.status_code == second.status_code == 200
    assert first.json()["result"]["contents"] == second.json()["result"]["contents"]


async def test_a_reader_token_calls_no_tool(tool_server: RunningToolServer) -> None:
    async with connect(tool_server.url, reader_token(tool_server), MODERN) as client:
        result = await client.call_tool("caseops_get_case_snapshot", {"case_id": "C-102"})

    assert result.is_error is True
    assert result.structured_content == {
        "error": {
            "code": "TOKEN_NOT_FOR_TOOL",
            "message": "the task token was minted for another tool than caseops_get_case_snapshot",
        }
    }

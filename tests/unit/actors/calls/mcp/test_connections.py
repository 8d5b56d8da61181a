"""Which way a call to a toolset server goes: one POST where the stateless era allows, the SDK where it must."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from actors.calls.mcp.connections import McpConnections
from actors.launch.settings import shipped_toolsets
from actors.toolsets.config import parse_toolsets
from dag.contracts import Risk, ToolContract
from dag.schemas import JsonSchema
from mcp_server.contracts import CASEOPS_TOOLS

PINNED = shipped_toolsets("http://127.0.0.1:9/mcp").servers[0]  # 2026-07-28, raydag's task tokens


def server_of_others(protocol: str = "auto") -> Any:
    text = f"""\
servers:
  - name: search
    transport: streamable-http
    url: http://127.0.0.1:9/mcp
    protocol: '{protocol}'
    auth: none
    tools:
      search: {{scope: search:read, risk: read_only}}
"""
    return parse_toolsets(text, "toolsets.yaml", {}).servers[0]


def with_input(schema: dict[str, Any]) -> ToolContract:
    return ToolContract(
        name="search",
        version="sha256:0",
        description="Search",
        scope="search:read",
        risk=Risk.READ_ONLY,
        declared_input=JsonSchema.of(schema),
    )


PLAIN = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
HEADERED = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "query": {"type": "string"}},
    "required": ["region", "query"],
}


@pytest.fixture
def connections() -> Any:
    made = McpConnections([PINNED])
    yield made
    asyncio.run(made.aclose())


def test_a_pinned_stateless_server_is_posted_to_directly(connections: McpConnections) -> None:
    assert connections._posts_directly(PINNED, CASEOPS_TOOLS["caseops_get_case_snapshot"])
    assert connections._posts_directly(PINNED, with_input(PLAIN))


def test_a_tool_that_mirrors_an_argument_into_a_header_goes_through_the_sdk(
    connections: McpConnections,
) -> None:
    assert not connections._posts_directly(PINNED, with_input(HEADERED))


def test_a_server_of_unknown_era_goes_through_the_sdk(connections: McpConnections) -> None:
    assert not connections._posts_directly(server_of_others(), with_input(PLAIN))


def test_anyone_elses_server_goes_through_the_sdk_even_pinned(connections: McpConnections) -> None:
    """Without raydag's tokens it is no server of raydag's: the SDK answers its requests for input in full."""
    pinned = server_of_others("2026-07-28")
    assert not connections._posts_directly(pinned, with_input(PLAIN))


def test_asking_for_the_sdk_path_takes_it_everywhere() -> None:
    sdk = McpConnections([PINNED], sdk_calls=True)
    try:
        assert not sdk._posts_directly(PINNED, with_input(PLAIN))
    finally:
        asyncio.run(sdk.aclose())


def test_the_task_token_client_reads_as_long_as_its_longest_call_may_take() -> None:
    # A plain call whose question waits for a person says nothing on its stream meanwhile: the shared client
    # must not cut it before the call's own deadline, as a 30 s read timeout did.
    patient = PINNED.model_copy(update={"timeouts": PINNED.timeouts.model_copy(update={"call_s": 600.0})})
    for servers, read_s in (([PINNED], 30.0), ([PINNED, patient], 600.0), ([server_of_others()], 30.0)):
        made = McpConnections(servers)
        try:
            assert made._http.timeout.read == read_s
        finally:
            asyncio.run(made.aclose())

"""One Idempotency-Key, many concurrent requests through the Serve API: one run, and each of its tool calls
executed once — as the MCP tool server itself counts them, not as raydag's ledger records them."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx

from mcp_server.contracts import CASEOPS_CHECKS
from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth
from tests.integration.seeding import (
    ACCIDENT_CERTIFICATE_LABEL,
    TENANT,
    case_file,
    seed,
    unique_case_id,
)

REQUESTS = 12


def executions_for(tool_server: RunningToolServer, case_id: str) -> Counter[str]:
    """The tool server's own count of calls that executed for ``case_id``, by tool."""
    return Counter(
        {
            tool: count
            for (tenant, case, tool), count in tool_server.server.executions.items()
            if (tenant, case) == (TENANT, case_id)
        }
    )


async def test_concurrent_requests_with_one_key_execute_each_tool_call_once_on_the_tool_server(
    api: str, dsn: str, tool_server: RunningToolServer
) -> None:
    # A case of this test's own, so that the server's counts for it are this run's calls and nothing else's.
    case_id = unique_case_id("C-IDEM")
    await seed(dsn, case_file(case_id, [ACCIDENT_CERTIFICATE_LABEL]))
    headers = {**auth(DEMO_KEY), "Idempotency-Key": f"concurrent-{case_id}"}

    async with httpx.AsyncClient(base_url=api, timeout=120) as http:
        responses = await asyncio.gather(
            *(
                http.post("/runs", params={"wait": 30}, json={"case_id": case_id}, headers=headers)
                for _ in range(REQUESTS)
            )
        )

    assert Counter(response.status_code for response in responses) == {201: 1, 200: REQUESTS - 1}
    runs = {response.json()["run_id"] for response in responses}
    assert len(runs) == 1
    assert {response.json()["status"] for response in responses} == {"completed"}
    # case, policy, docs and the one document's resolution: one call each reached the tools and ran.
    assert executions_for(tool_server, case_id) == Counter(dict.fromkeys(CASEOPS_CHECKS, 1))

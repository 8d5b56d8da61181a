"""A toolset's resource check that is one of its tools: called over real MCP, with a task token minted for the
requester, before a run is created."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actors.calls.executors import RayToolExecutor
from actors.launch.settings import shipped_toolsets
from actors.run.deps import RunDeps, ToolEndpoint
from actors.run.service import RunService
from actors.run.submission import RunRequest, Submission
from actors.store.database import create_pool
from actors.toolsets.config import parse_toolsets
from dag.budget import Budgets
from dag.policy import Principal
from dag.tokens import TaskTokens
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS
from mcp_server.planner import ConformancePlanner
from tests.integration.conftest import RunningToolServer

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
CHECKED_BY_ITS_SNAPSHOT = """\
version: 1
servers:
  - name: caseops
    transport: streamable-http
    url: ${RAYDAG_MCP_URL}
    auth: raydag-token
    resource_check: {tool: caseops_get_case_snapshot}
    tools:
"""


@pytest.fixture
async def service(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> AsyncIterator[RunService]:
    tools = "".join(
        f"      {name}: {{scope: '{contract.scope}', risk: read_only, run_bound: {{case_id: case_id}}}}\n"
        for name, contract in CASEOPS_TOOLS.items()
    )
    toolsets = parse_toolsets(
        CHECKED_BY_ITS_SNAPSHOT + tools, "checked.yaml", {"RAYDAG_MCP_URL": tool_server.url}
    )
    assert (
        toolsets.server("caseops").tools.keys()
        == shipped_toolsets(tool_server.url).server("caseops").tools.keys()
    )
    pool = await create_pool(dsn, max_size=2)
    deps = RunDeps(
        executor=RayToolExecutor(CASEOPS_TOOLS),
        catalogue=CASEOPS_TOOLS,
        planners={"conformance": ConformancePlanner()},
        endpoint=ToolEndpoint(
            url=tool_server.url, tokens=TaskTokens(key=token_key, audience=tool_server.url)
        ),
    )
    running = RunService(
        deps,
        pool=pool,
        toolset_planner="conformance",  # as the shipped toolsets name it
        limits=Budgets(),
        owner="resource-check-test",
        toolsets=toolsets,
    )
    yield running
    await running.close()
    await pool.close()


async def test_a_tool_check_admits_the_tenants_case_and_refuses_another_tenants_as_an_unknown_one(
    service: RunService, tool_server: RunningToolServer
) -> None:
    snapshots_before = tool_server.server.calls.get("caseops_get_case_snapshot", 0)

    theirs = await service.submit(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-201"}))
    unknown = await service.submit(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-999"}))
    ours = await service.submit(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))

    assert (
        (theirs.outcome, theirs.run_id)
        == (unknown.outcome, unknown.run_id)
        == (Submission.RESOURCE_NOT_FOUND, None)
    )
    assert (
        theirs.error
        == unknown.error
        == {"problem": "resource-not-found", "detail": "no such resource was found"}
    )
    assert ours.outcome is Submission.CREATED
    assert ours.run_id is not None
    assert await service.wait(ours.run_id, 60.0)
    # One check call per submission, then the run's own snapshot node.
    assert tool_server.server.calls.get("caseops_get_case_snapshot", 0) - snapshots_before == 3 + 1

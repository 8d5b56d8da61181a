"""A budget that refuses a ``for_each`` stops the run with its reason, never ``completed`` on partial evidence
(issue 26): over real Ray, PostgreSQL and the toy MCP server, through a supervisor, under the outputs planner
(whose answer, every output it saw, would otherwise read as the whole run's)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.states import NodeStatus, RunStatus, StopReason
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_toolsets_supervisor import run_to_end
from tests.integration.toolset_servers import toy_toolsets

ITEMS = "      items: {scope: toy:read, risk: read_only}\n"


def listing(node_id: str, count: int) -> dict[str, Any]:
    return {"id": node_id, "tool": "items", "args": {"count": count}}


def each(node_id: str, source: str) -> dict[str, Any]:
    """An echo of every item ``source`` lists."""
    return {
        "id": node_id,
        "tool": "echo",
        "for_each": {"$ref": source, "pointer": "/items"},
        "args": {"text": {"$item": ""}},
    }


@pytest.fixture
def name() -> str:
    return f"raydag-test-fanout-{uuid.uuid4().hex[:6]}"


async def test_a_fan_out_a_budget_refuses_stops_the_run_with_its_reason_and_the_next_run_completes(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
) -> None:
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toy_toolsets(extra_tools=ITEMS))
    budgets = BudgetRequest(max_nodes=64, max_fanout=32)
    try:
        too_wide = await run_to_end(
            supervisor,
            store,
            {"nodes": [listing("list", 100_000), each("fan", "list")]},
            planner="outputs",
            budgets=budgets,
        )
        too_many = await run_to_end(
            supervisor,
            store,
            {
                "nodes": [
                    listing("list", 32),
                    each("fan1", "list"),
                    each("fan2", "list"),
                    each("fan3", "list"),
                ]
            },
            planner="outputs",
            budgets=budgets,
        )
        normal = await run_to_end(
            supervisor,
            store,
            {"nodes": [listing("list", 3), each("fan", "list")]},
            planner="outputs",
            budgets=budgets,
        )
    finally:
        ray.kill(supervisor)

    assert (too_wide.status, too_wide.stop_reason) == (RunStatus.STOPPED, StopReason.FANOUT_LIMIT)
    assert too_wide.detail == "fan: budget max_fanout exhausted: 100000 > 32"
    assert len(too_wide.nodes["list"].output["items"]) == 100_000  # the tool answered
    fan = too_wide.nodes["fan"]
    assert fan.status is NodeStatus.CANCELLED
    assert not fan.children  # never expanded
    # The joiner's answer is kept as partial: it names what ran, and claims no output of the fan-out.
    assert too_wide.result is not None
    assert list(too_wide.result["outputs"]) == ["list"]

    assert (too_many.status, too_many.stop_reason) == (RunStatus.STOPPED, StopReason.NODE_BUDGET_EXHAUSTED)
    assert too_many.detail == "fan2: budget max_nodes exhausted: 68 > 64"  # 4 plan nodes + 32 + 32
    fitted = too_many.nodes["fan1"].children
    assert fitted is not None
    assert len(fitted) == 32
    # The expansion that fitted was cancelled with the run: none of its calls ran.
    assert {too_many.nodes[child].status for child in fitted} == {NodeStatus.CANCELLED}
    assert too_many.result is not None
    assert list(too_many.result["outputs"]) == ["list"]

    assert (normal.status, normal.stop_reason) == (RunStatus.COMPLETED, None)
    assert normal.result is not None
    outputs = normal.result["outputs"]
    assert [outputs[f"fan[{index}]"]["text"] for index in range(3)] == ["i0", "i1", "i2"]

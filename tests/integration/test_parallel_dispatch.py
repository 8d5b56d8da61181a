"""Independent nodes run at the same time, and a dependent starts only after its dependency — from the ledger."""

from __future__ import annotations

from typing import Any

import ray

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES
from tests.integration.conftest import supervisor_for

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
LATENCY_MS = 300


async def run_to_end(supervisor: Any, case_id: str) -> str:
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": case_id}))
    assert submitted.outcome is Submission.CREATED
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    return str(submitted.run_id)


async def test_case_policy_and_docs_overlap_and_resolve_waits_for_docs(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    slow = start_tool_server(latency_ms=LATENCY_MS)  # every call takes 300 ms, so overlap is unambiguous
    supervisor = supervisor_for(dsn, slow, token_key, "raydag-test-slow-supervisor")
    await run_to_end(supervisor, "C-102")  # warm the Ray worker pool; cold workers start one by one

    run_id = await run_to_end(supervisor, "C-102")

    ledger = {row["node_id"]: row for row in await store.ledger(run_id)}
    assert (await store.run_row(PRINCIPAL, run_id) or {})["status"] == "completed"
    first_layer = [ledger[node] for node in ("case", "policy", "docs")]
    latest_start = max(row["started_at"] for row in first_layer)
    earliest_finish = min(row["finished_at"] for row in first_layer)
    assert latest_start < earliest_finish, "the three independent calls must all be in flight at one moment"
    assert ledger["resolve[0]"]["started_at"] >= ledger["docs"]["finished_at"]
    ray.kill(supervisor)

"""The control plane on the real stack: cancellation, retries, the circuit breaker, deadlines, parallelism
limits and read authorization — through Serve, Ray, the MCP server and PostgreSQL."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES
from tests.conftest import REPO
from tests.integration.conftest import (
    DEMO_KEY,
    NO_DOCUMENTS_KEY,
    RunningToolServer,
    auth,
    supervisor_for,
)

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
OTHER = Principal("tenant-other", "test", frozenset(ALL_SCOPES))
SNAPSHOT = "caseops_get_case_snapshot"


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/runs/{run_id}/events", headers=auth(DEMO_KEY))
    response.raise_for_status()
    return list(response.json())


def wait_for_event(client: httpx.Client, run_id: str, kind: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(event["kind"] == kind for event in events_of(client, run_id)):
        assert time.monotonic() < deadline, f"no {kind} event within {timeout_s}s"
        time.sleep(0.05)


def test_cancelling_a_live_run_cancels_its_calls_and_dispatches_nothing_more(
    client: httpx.Client, simulated: RunningToolServer
) -> None:
    simulated.server.simulate(latency_ms=20_000)  # every call hangs far longer than the test
    run_id = client.post("/runs", json={"case_id": "C-102"}, headers=auth(DEMO_KEY)).json()["run_id"]
    wait_for_event(client, run_id, "node_dispatched")

    cancelled = client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))

    assert cancelled.status_code == 200, cancelled.text
    body = cancelled.json()
    assert (body["cancel"], body["status"], body["stop_reason"]) == ("cancelled", "cancelled", "CANCELLED")
    events = events_of(client, run_id)
    assert events[-1]["kind"] == "run_finished"
    assert not any(event["kind"] == "node_succeeded" for event in events)
    nodes = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()
    assert {node["status"] for node in nodes} == {"cancelled"}


def test_cancelling_a_finished_run_is_a_harmless_no_op(client: httpx.Client) -> None:
    run = client.post("/runs", params={"wait": 60}, json={"case_id": "C-101"}, headers=auth(DEMO_KEY)).json()

    again = client.post(f"/runs/{run['run_id']}/cancel", headers=auth(DEMO_KEY)).json()

    assert (again["cancel"], again["status"], again["result"]) == (
        "already_finished",
        "completed",
        run["result"],
    )


def test_raydag_cancel_reports_a_finished_run_and_refuses_an_unknown_one(
    api: str, client: httpx.Client
) -> None:
    run = client.post("/runs", params={"wait": 60}, json={"case_id": "C-101"}, headers=auth(DEMO_KEY)).json()
    raydag = str(Path(sys.executable).parent / "raydag")

    def cancel(run_id: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [raydag, "cancel", run_id, "--url", api, "--api-key", DEMO_KEY],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    finished = cancel(run["run_id"])
    unknown = cancel(str(uuid.uuid4()))

    assert finished.returncode == 0, finished.stderr
    assert "already finished (completed)" in finished.stdout
    assert unknown.returncode == 2
    assert "Not Found" in unknown.stderr


async def test_a_transient_failure_is_retried_and_each_attempt_is_a_ledger_row(
    api: str, simulated: RunningToolServer, store: RunStore
) -> None:
    simulated.server.simulate(faults={SNAPSHOT: 1})
    async with httpx.AsyncClient(base_url=api, timeout=90) as http:
        response = await http.post(
            "/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY)
        )
    run = response.json()

    assert run["status"] == "completed"
    attempts = [row for row in await store.ledger(run["run_id"]) if row["node_id"] == "case"]
    assert [(row["attempt"], row["status"]) for row in attempts] == [(1, "failed"), (2, "succeeded")]
    assert attempts[0]["error"]["code"] == "UPSTREAM_UNAVAILABLE"
    assert attempts[0]["error"]["kind"] == "transient"
    kinds = [stored.event.kind for stored in await store.events(run["run_id"])]
    assert kinds.count("node_retry_scheduled") == 1


async def test_a_tool_that_keeps_failing_rests_for_its_tenant_and_no_run_completes_on_its_failures(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    import ray

    failing = start_tool_server()
    failing.server.simulate(faults={SNAPSHOT: 1_000})
    supervisor = supervisor_for(dsn, failing, token_key, f"raydag-test-breaker-{uuid.uuid4().hex[:6]}")

    async def run(request: RunRequest) -> Any:
        submitted = await supervisor.submit.remote(request)
        assert submitted.outcome is Submission.CREATED
        await supervisor.wait.remote(submitted.run_id, 60.0)
        return await _state(store, submitted.run_id), await store.ledger(submitted.run_id)

    try:
        # 3 attempts: then the node has no answer, and the run says so instead of judging the case.
        first, first_ledger = await run(
            RunRequest(
                principal=PRINCIPAL, resource={"case_id": "C-101"}, budgets=BudgetRequest(deadline_s=60)
            )
        )
        # 2 more failures open this tenant's circuit (5 in a row): the calls wait for probes, none is denied,
        # and the failures during the outage do not use up the node's 3 attempts.
        second, second_ledger = await run(
            RunRequest(
                principal=PRINCIPAL, resource={"case_id": "C-101"}, budgets=BudgetRequest(deadline_s=15)
            )
        )
        # Another tenant's call to the same tool is not held back by the first tenant's circuit.
        third, third_ledger = await run(
            RunRequest(principal=OTHER, resource={"case_id": "C-201"}, budgets=BudgetRequest(deadline_s=60))
        )
    finally:
        ray.kill(supervisor)

    assert (first.status.value, first.stop_reason.value) == ("stopped", "EVIDENCE_INCOMPLETE")
    assert f"case ({SNAPSHOT}: UPSTREAM_UNAVAILABLE)" in first.detail
    assert [row["attempt"] for row in first_ledger if row["node_id"] == "case"] == [1, 2, 3]
    # It ends when no further probe could finish within its deadline: either way, without an answer.
    assert second.status.value == "stopped"
    assert second.stop_reason.value in ("EVIDENCE_INCOMPLETE", "DEADLINE_EXCEEDED")
    assert len([row for row in second_ledger if row["node_id"] == "case"]) > 3
    for state in (first, second, third):
        assert not [node for node in state.nodes.values() if node.status.value == "denied"]
        assert state.status.value != "completed"
    other_case = [row for row in third_ledger if row["node_id"] == "case"]
    assert [row["attempt"] for row in other_case] == [1, 2, 3]  # its own attempts, not a wait on tenant-demo
    assert (third.status.value, third.stop_reason.value) == ("stopped", "EVIDENCE_INCOMPLETE")
    assert not [key for key in failing.server.executions if key[2] == SNAPSHOT]


async def _state(store: RunStore, run_id: str) -> Any:
    from actors.api.views import load_state

    return await load_state(store, run_id)


def test_the_deadline_stops_a_run_whose_calls_hang(
    client: httpx.Client, simulated: RunningToolServer
) -> None:
    simulated.server.simulate(latency_ms=20_000)

    run = client.post(
        "/runs",
        params={"wait": 60},
        json={"case_id": "C-102", "budgets": {"deadline_s": 1}},
        headers=auth(DEMO_KEY),
    ).json()

    assert (run["status"], run["stop_reason"]) == ("stopped", "DEADLINE_EXCEEDED")


async def test_max_parallel_one_never_overlaps_two_calls(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    import ray

    slow = start_tool_server(latency_ms=150)
    supervisor = supervisor_for(dsn, slow, token_key, f"raydag-test-serial-{uuid.uuid4().hex[:6]}")
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(
                principal=PRINCIPAL, resource={"case_id": "C-102"}, budgets=BudgetRequest(max_parallel=1)
            )
        )
        assert await supervisor.wait.remote(submitted.run_id, 60.0)
    finally:
        ray.kill(supervisor)

    rows = sorted(await store.ledger(submitted.run_id), key=lambda row: row["dispatched_at"])
    assert len(rows) == 4
    for earlier, later in itertools.pairwise(rows):
        assert later["dispatched_at"] >= earlier["finished_at"]


def test_a_key_without_the_runs_scopes_cannot_read_it(client: httpx.Client) -> None:
    run = client.post("/runs", params={"wait": 60}, json={"case_id": "C-101"}, headers=auth(DEMO_KEY)).json()

    narrower = client.get(f"/runs/{run['run_id']}/nodes", headers=auth(NO_DOCUMENTS_KEY))

    assert narrower.status_code == 404
    assert client.get(f"/runs/{run['run_id']}", headers=auth(NO_DOCUMENTS_KEY)).status_code == 404


def test_an_idempotency_key_replayed_by_another_principal_is_a_conflict(client: httpx.Client) -> None:
    key = f"shared-{uuid.uuid4()}"
    first = client.post(
        "/runs", json={"case_id": "C-101"}, headers={**auth(DEMO_KEY), "Idempotency-Key": key}
    )

    other = client.post(
        "/runs", json={"case_id": "C-101"}, headers={**auth(NO_DOCUMENTS_KEY), "Idempotency-Key": key}
    )

    assert first.status_code == 201
    assert other.status_code == 409


def test_an_unauthenticated_request_is_401_before_its_body_is_looked_at(client: httpx.Client) -> None:
    response = client.post("/runs", json={"tenant_id": "tenant-other", "case_id": 5})

    assert response.status_code == 401


def test_an_unknown_planner_is_a_422_listing_the_known_ones(client: httpx.Client) -> None:
    response = client.post("/runs", json={"case_id": "C-102", "planner": "gpt"}, headers=auth(DEMO_KEY))

    assert response.status_code == 422
    assert response.json()["known"] == ["conformance", "outputs"]

"""Continuing a stopped run, over the real API, supervisor, PostgreSQL and MCP servers: the continuation is a
run of its own, linked both ways, that reuses every read that succeeded and takes the writes over by id. Calls
and effects are counted on the tool servers' side (their call counts, caseops' outbox), never in raydag's
records."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, RunningToolServer, auth
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import (
    ACT,
    DRAFT,
    SEND,
    decide,
    finished,
    operations,
    sent,
    wait_for,
    waiting,
)

SNAPSHOT = "caseops_get_case_snapshot"


def events(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/runs/{run_id}/events", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()
    return listed


def nodes(client: httpx.Client, run_id: str) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    return {node["node_id"]: node for node in answer.json()}


def called(listed: dict[str, dict[str, Any]]) -> set[str]:
    """The tools of the nodes that made a call and succeeded (a ``for_each`` group makes none itself)."""
    return {
        node["tool"] for node in listed.values() if node["status"] == "succeeded" and node["children"] is None
    }


def continue_run(client: httpx.Client, run_id: str, key: str = DEMO_KEY, **body: Any) -> httpx.Response:
    return client.post(f"/runs/{run_id}/continue", json=body or None, headers=auth(key))


def test_a_run_stopped_on_a_rejected_send_continues_without_drafting_again_and_sends_once(
    client: httpx.Client, dsn: str, tool_server: RunningToolServer
) -> None:
    calls_before = dict(tool_server.server.calls)
    created = client.post("/runs", json=ACT, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    first = created.json()["run_id"]
    wait_for(client, first, waiting)
    send = operations(client, first)[SEND]
    assert decide(client, first, send, "reject", APPROVER_KEY, note="not yet").status_code == 200
    stopped = wait_for(client, first, finished)
    assert (stopped["status"], stopped["stop_reason"]) == ("needs_human", "OPERATION_REJECTED"), stopped
    record_before = events(client, first)
    draft = operations(client, first)[DRAFT]

    continued = continue_run(client, first, answer="the certificate is overdue now")
    assert continued.status_code == 201, continued.text
    second = continued.json()["run_id"]
    assert continued.headers["location"] == f"/runs/{second}"
    assert continued.json()["continues"] == first
    wait_for(client, second, waiting)
    again = operations(client, second)[SEND]
    assert again["operation_id"] != send["operation_id"]  # a rejected write is asked for anew
    assert again["args_hash"] == send["args_hash"]  # over the same draft: the draft was taken over
    assert decide(client, second, again, "approve", APPROVER_KEY).status_code == 200
    done = wait_for(client, second, finished)
    calls = {tool: count - calls_before.get(tool, 0) for tool, count in tool_server.server.calls.items()}
    second_nodes = nodes(client, second)

    assert (done["status"], done["stop_reason"]) == ("completed", None), done
    assert client.get(f"/runs/{first}", headers=auth(DEMO_KEY)).json()["continued_by"] == second
    assert events(client, first) == record_before  # the earlier run's record is exactly as it was
    assert (sent(dsn, send), sent(dsn, again)) == (0, 1)
    # Every call that succeeded in the first run was made once across both: the reads, the draft.
    assert {tool: count for tool, count in calls.items() if count} == {
        **{tool: 1 for tool in called(nodes(client, first))},
        SEND: 1,
    }, calls
    assert operations(client, first)[DRAFT] == draft  # the draft is the first run's, untouched
    reused = [node for node in second_nodes.values() if node["status"] == "reused"]
    assert reused, second_nodes
    assert {node["reused_from_run"] for node in reused} == {first}
    [continued_event] = [event for event in events(client, second) if event["kind"] == "run_continued"]
    assert continued_event["by"] == "person:tenant-demo/dev-demo"
    assert continued_event["answers"][-1]["answer"] == "the certificate is overdue now"
    assert [operation["tool"] for operation in continued_event["operations"]] == [DRAFT]

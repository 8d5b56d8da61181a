"""Continuing a stopped run, over the real API, supervisor, PostgreSQL and MCP servers: the continuation is a
run of its own, linked both ways, that reuses every read that succeeded and takes the writes over by id. Calls
and effects are counted on the tool servers' side (their call counts, caseops' outbox), never in raydag's
records."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import shipped_toolsets
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, OTHER_KEY, RunningToolServer, auth, raydag_cli
from tests.integration.headless import Chromium
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import (
    ACT,
    DRAFT,
    SEND,
    act_on_a_copy,
    decide,
    finished,
    operations,
    own_api,
    problem,
    sent,
    wait_for,
    waiting,
)
from tests.integration.test_toolsets_supervisor import merged, unreachable_toolsets
from tests.integration.test_viewer import view_url
from tests.integration.toy_mcp_server import http_app

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
    created = client.post("/runs", json=act_on_a_copy(dsn), headers=auth(DEMO_KEY))
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
    # The draft is the first run's, untouched; the continuation took it over, and shares it.
    taken_over = operations(client, first)[DRAFT]
    assert {**taken_over, "shared": False, "runs": draft["runs"]} == draft
    assert [entry["run_id"] for entry in taken_over["runs"]] == [first, second]
    reused = [node for node in second_nodes.values() if node["status"] == "reused"]
    assert reused, second_nodes
    assert {node["reused_from_run"] for node in reused} == {first}
    [continued_event] = [event for event in events(client, second) if event["kind"] == "run_continued"]
    assert continued_event["by"] == "person:tenant-demo/dev-demo"
    assert continued_event["answers"][-1]["answer"] == "the certificate is overdue now"
    assert [operation["tool"] for operation in continued_event["operations"]] == [DRAFT]


ECHO_AFTER_CASE = {
    "nodes": [
        {"id": "case", "tool": SNAPSHOT, "args": {"case_id": "C-102"}},
        {"id": "echo", "tool": "echo", "args": {"text": {"$ref": "case", "pointer": "/case_id"}}},
    ]
}


def test_a_run_stopped_by_a_server_that_was_down_continues_once_it_is_back_calling_nothing_twice(
    ray_cluster: None,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """The toy server is listed, then goes down: the run's caseops read succeeds, its echo finds nobody there
    and the run stops. Once the server is back on its address, the continuation calls the echo only."""
    toy = BackgroundServer(host="127.0.0.1").start(http_app(), timeout_s=30)
    tools: RunningToolServer = start_tool_server()
    toolsets = merged(shipped_toolsets(tools.url), unreachable_toolsets(toy.url + "/mcp"))
    base = serve_api(api_config(scratch_dsn, tools.url, token_key, toolsets=toolsets))  # both listed
    toy.stop()
    try:
        with httpx.Client(base_url=base, timeout=60) as client:
            body = {"case_id": "C-102", "plan": ECHO_AFTER_CASE, "planner": "outputs"}
            created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
            assert created.status_code == 201, created.text
            first = created.json()["run_id"]
            stopped = wait_for(client, first, finished, within_s=120)
            first_nodes = nodes(client, first)
            assert stopped["status"] in ("stopped", "needs_human"), stopped
            assert (first_nodes["case"]["status"], first_nodes["echo"]["status"]) == ("succeeded", "failed")
            assert tools.server.calls == {SNAPSHOT: 1}

            toy = BackgroundServer(host="127.0.0.1", port=toy.port).start(http_app(), timeout_s=30)
            continued = continue_run(client, first)
            assert continued.status_code == 201, continued.text
            second = continued.json()["run_id"]
            done = wait_for(client, second, finished)
            second_nodes = nodes(client, second)
    finally:
        toy.stop()

    assert (done["status"], done["stop_reason"]) == ("completed", None), done
    assert tools.server.calls == {SNAPSHOT: 1}  # the read that succeeded was not made again
    assert (second_nodes["case"]["status"], second_nodes["case"]["reused_from_run"]) == ("reused", first)
    assert second_nodes["echo"]["status"] == "succeeded"
    assert done["result"]["outputs"]["echo"]["text"] == "C-102"


def test_what_a_continuation_may_not_do_is_refused_with_a_specific_problem(
    client: httpx.Client, dsn: str
) -> None:
    live = client.post("/runs", json=act_on_a_copy(dsn), headers=auth(DEMO_KEY)).json()["run_id"]
    wait_for(client, live, waiting)
    completed = client.post("/runs", json={"case_id": "C-102"}, headers=auth(DEMO_KEY)).json()["run_id"]
    wait_for(client, completed, finished)
    stopped = stopped_run(client)
    unknown = "00000000-0000-4000-8000-000000000000"

    try:
        assert problem(continue_run(client, live)) == (409, "run-not-finished")
        assert problem(continue_run(client, completed)) == (409, "run-not-continuable")
        assert problem(continue_run(client, stopped, budgets={"deadline_s": -1})) == (422, "invalid-request")
        assert problem(continue_run(client, stopped, budgets={"max_nodes": 9_000})) == (
            422,
            "budget-above-limit",
        )
        assert problem(continue_run(client, stopped, answer="\x00")) == (422, "invalid-request")
        assert problem(continue_run(client, stopped, tenant_id="tenant-other")) == (422, "invalid-request")
        assert problem(continue_run(client, stopped, resource={"case_id": "C-103"})) == (
            422,
            "invalid-request",
        )
        # Another tenant's run is not found, exactly as an unknown one is.
        theirs = continue_run(client, stopped, key=OTHER_KEY)
        nobodys = continue_run(client, unknown, key=OTHER_KEY)
        assert problem(theirs) == problem(nobodys) == (404, "run-not-found")
        assert {**theirs.json(), "instance": None} == {**nobodys.json(), "instance": None}
        assert problem(continue_run(client, "not-a-uuid")) == (404, "run-not-found")
        assert client.get(f"/runs/{stopped}", headers=auth(DEMO_KEY)).json()["continued_by"] is None
    finally:
        client.post(f"/runs/{live}/cancel", headers=auth(DEMO_KEY))


def stopped_run(client: httpx.Client) -> str:
    """A C-102 run stopped by its node budget: its plan's four nodes fit, the documents it resolves do not."""
    body = {"case_id": "C-102", "budgets": {"max_nodes": 4}}
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    run = wait_for(client, run_id, finished)
    assert run["status"] == "stopped", (run["stop_reason"], run["detail"])
    return run_id


def test_a_run_continued_twice_at_once_has_one_continuation_and_a_continuation_continues_too(
    client: httpx.Client, tool_server: RunningToolServer
) -> None:
    calls_before = dict(tool_server.server.calls)
    first = stopped_run(client)

    def continue_once(_: int) -> httpx.Response:
        with httpx.Client(base_url=str(client.base_url), timeout=60) as other:
            return continue_run(other, first, budgets={"max_nodes": 4})

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(continue_once, range(4)))
    assert sorted(answer.status_code for answer in answers) == [200, 200, 200, 201], [a.text for a in answers]
    [second] = {answer.json()["run_id"] for answer in answers}
    assert problem(continue_run(client, first, budgets={"max_nodes": 3})) == (409, "run-already-continued")
    assert continue_run(client, first, budgets={"max_nodes": 3}).json()["run_id"] == second
    stopped_again = wait_for(client, second, finished)
    assert stopped_again["stop_reason"] == "NODE_BUDGET_EXHAUSTED", stopped_again  # still too few

    third = continue_run(client, second, budgets={"max_nodes": 64})
    assert third.status_code == 201, third.text
    done = wait_for(client, third.json()["run_id"], finished)
    calls = {tool: count - calls_before.get(tool, 0) for tool, count in tool_server.server.calls.items()}

    assert (done["status"], done["continues"]) == ("completed", second), (done["stop_reason"], done["detail"])
    chain = [client.get(f"/runs/{run}", headers=auth(DEMO_KEY)).json() for run in (first, second)]
    assert [run["continued_by"] for run in chain] == [second, done["run_id"]]
    # Nothing was called twice across the three runs: no two nodes that succeeded by calling made the same call,
    # and the server took no call raydag did not dispatch. (A read still out when a run stopped was cancelled,
    # never succeeded, and is called by the continuation: that is not a repeat. Whether the cancelled call
    # reached the server first is timing, so the server's count lies between the two.)
    listed = [nodes(client, run) for run in (first, second, done["run_id"])]
    made = [call for run in listed for call in calls_made(run)]
    dispatched = sum(
        len(node["history"]) for run in listed for node in run.values() if node["children"] is None
    )
    assert len(made) <= sum(calls.values()) <= dispatched, (calls, made, dispatched)
    assert len(made) == len(set(made)), made


def calls_made(listed: dict[str, dict[str, Any]]) -> list[str]:
    """The calls of the nodes that succeeded by calling (not reused, not a ``for_each`` group): tool and args."""
    return [
        json.dumps([node["tool"], node["args"]], sort_keys=True)
        for node in listed.values()
        if node["status"] == "succeeded" and node["children"] is None
    ]


def test_a_supervisor_killed_mid_continuation_loses_nothing_and_calls_nothing_again(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    import ray

    base, tools, supervisor = own_api(start_tool_server, scratch_dsn, token_key, serve_api)
    with httpx.Client(base_url=base, timeout=30) as client:
        first = client.post("/runs", json=ACT, headers=auth(DEMO_KEY)).json()["run_id"]
        wait_for(client, first, waiting)
        rejected = operations(client, first)[SEND]
        assert decide(client, first, rejected, "reject", APPROVER_KEY).status_code == 200
        wait_for(client, first, finished)
        first_calls = called(nodes(client, first))

        continued = continue_run(client, first)
        assert continued.status_code == 201, continued.text
        second = continued.json()["run_id"]
        ray.kill(supervisor, no_restart=False)  # wherever the continuation is: Ray starts another

        wait_for(client, second, waiting, within_s=120)  # recovered, and asking for the send again
        send = operations(client, second)[SEND]
        approved = decide(client, second, send, "approve", APPROVER_KEY)
        while approved.status_code == 503:  # the supervisor is starting again: as documented, retry after
            time.sleep(float(approved.headers["retry-after"]))
            approved = decide(client, second, send, "approve", APPROVER_KEY)
        assert approved.status_code == 200, approved.text
        done = wait_for(client, second, finished)
        recorded = [event["kind"] for event in events(client, second)]

    assert (done["status"], done["stop_reason"]) == ("completed", None), done
    assert tools.server.calls == {**{tool: 1 for tool in first_calls}, SEND: 1}  # nothing called twice
    assert (sent(dsn, rejected), sent(dsn, send)) == (0, 1)
    assert recorded[:2] == ["run_created", "run_continued"]
    assert recorded.count("run_continued") == 1
    # Either it was live when its supervisor died, and the restarted one took it over; or it had already
    # parked on the send's approval (nobody drives a parked run), and the approval woke it there.
    assert "run_recovered" in recorded or {"run_parked", "run_woken"} <= set(recorded), recorded


def test_a_send_left_unknown_when_its_run_stopped_is_reconciled_by_the_continuation_never_sent_again(
    client: httpx.Client, dsn: str, simulated: RunningToolServer
) -> None:
    body = {**act_on_a_copy(dsn), "budgets": {"deadline_s": 8}}
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    first = created.json()["run_id"]
    wait_for(client, first, waiting)
    send = operations(client, first)[SEND]
    simulated.server.simulate(stall_after_commit={SEND: 1})  # it sends, and the answer never comes
    calls_before = simulated.server.calls.get(SEND, 0)
    assert decide(client, first, send, "approve", APPROVER_KEY).status_code == 200
    stopped = wait_for(client, first, finished, within_s=60)
    assert (stopped["status"], stopped["stop_reason"]) == ("stopped", "DEADLINE_EXCEEDED"), stopped
    assert sent(dsn, send) == 1

    continued = continue_run(client, first, budgets={"deadline_s": 120})
    assert continued.status_code == 201, continued.text
    second = continued.json()["run_id"]
    done = wait_for(client, second, finished, within_s=90)
    settled = operations(client, first)[SEND]
    taken_over = operations(client, second)[SEND]  # listed under the continuation too, as the first run's

    assert (done["status"], done["stop_reason"]) == ("completed", None), done
    assert sent(dsn, send) == 1
    assert simulated.server.calls.get(SEND, 0) - calls_before == 1  # reconciled by a read, not sent again
    assert settled["state"] == "succeeded"
    assert [step["to"] for step in settled["history"]][-2:] == ["unknown", "succeeded"]
    assert done["result"]["document_request"]["request_id"] == settled["output"]["request_id"]
    assert (taken_over["operation_id"], taken_over["run_id"]) == (settled["operation_id"], first)
    assert taken_over["state"] == "succeeded"


def test_raydag_continue_continues_a_stopped_run_and_says_why_it_cannot_continue_another(
    client: httpx.Client,
) -> None:
    url = str(client.base_url)
    first = stopped_run(client)

    continued = raydag_cli(
        "continue", first, "--budget", "max_nodes=64", "--answer", "resolve it", url=url, key=DEMO_KEY
    )
    malformed = raydag_cli("continue", first, "--budget", "max_nodes", url=url, key=DEMO_KEY)

    assert continued.returncode == 0, continued.stderr
    second = continued.stdout.split()[1]
    assert continued.stdout.strip().startswith(f"run {second} continues run {first}")
    done = wait_for(client, second, finished)
    assert done["status"] == "completed", done
    again = raydag_cli("continue", second, url=url, key=DEMO_KEY)
    assert again.returncode == 2
    assert "run-not-continuable" in again.stderr
    assert malformed.returncode == 2
    assert "give NAME=NUMBER" in malformed.stderr


def test_the_viewer_links_a_continuation_and_its_run_both_ways_and_says_whose_output_it_reused(
    client: httpx.Client, tmp_path: Path
) -> None:
    first = stopped_run(client)
    continued = continue_run(client, first, budgets={"max_nodes": 64})
    assert continued.status_code == 201, continued.text
    second = continued.json()["run_id"]
    wait_for(client, second, finished)
    assert nodes(client, second)["docs"]["status"] == "reused", nodes(client, first)
    link = "document.querySelector('[data-continues] a')"
    back = "document.querySelector('[data-continued-by] a')"
    # The documents' listing succeeded in the first run whatever else was still out when it stopped: the
    # resolution it stopped at expands them.
    reused_row = "document.querySelector('[data-ledger-node=\"docs\"]')"

    with Chromium(tmp_path / "chromium") as browser:
        browser.open(view_url(str(client.base_url), second))
        browser.wait_for(f"document.body.dataset.ready === 'true' && {link} !== null")
        shown = browser.evaluate(f"{link}.textContent")
        reuse = browser.evaluate(f"{reused_row}.textContent")
        browser.evaluate(f"{link}.click()")  # the key stays in the tab: the earlier run opens as it is
        browser.wait_for(f"location.pathname.endsWith('/runs/{first}/view') && {back} !== null")
        shown_back = browser.evaluate(f"{back}.textContent")

    assert shown == first
    assert f"reused the output of docs of run {first[:8]}" in reuse
    assert shown_back == second

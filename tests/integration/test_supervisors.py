"""Many supervisors, one owner per run: a deployment's runs spread over its supervisors, every read and decision
works whichever owns a run, a cancellation reaches the owner, and a supervisor gone for good loses none of its
runs. Effects are counted where they happen (caseops' outbox, the tool server's calls)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import httpx

from actors.supervisor import NAMESPACE, supervisor_names
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, RunningToolServer, auth
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import (
    SEND,
    act_on_a_copy,
    decide,
    finished,
    operations,
    problem,
    run_owner,
    sent,
    wait_for,
    waiting,
)


def test_supervisor_names_keep_the_first_name_and_number_the_others() -> None:
    assert supervisor_names("raydag-supervisor", 1) == ("raydag-supervisor",)
    assert supervisor_names("sup", 3) == ("sup", "sup-1", "sup-2")


def test_two_supervisors_share_the_runs_and_one_gone_for_good_loses_none_of_them(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    import ray

    tools: RunningToolServer = start_tool_server(latency_ms=1500)  # each layer 1.5 s: runs live long enough
    # Leases of 3 s: a dead supervisor's runs lapse to the other in seconds, not the default 15.
    config = replace(api_config(scratch_dsn, tools.url, token_key, lease_s=3.0), supervisors=2)
    first, second = config.supervisor_names
    base = serve_api(config)
    with httpx.Client(base_url=base, timeout=30) as client:

        def created(body: dict[str, Any]) -> str:
            answer = client.post("/runs", json=body, headers=auth(DEMO_KEY))
            assert answer.status_code == 201, answer.text
            run_id: str = answer.json()["run_id"]
            return run_id

        acting = [created(act_on_a_copy(dsn, scratch_dsn)) for _ in range(3)]  # each, over a case of its own,
        # comes to wait for a person to approve its send
        checking = [created({"case_id": "C-102"}) for _ in range(4)]  # live, and owned, for seconds
        owners = {run_id: asyncio.run(run_owner(scratch_dsn, run_id)) for run_id in checking}
        assert set(owners.values()) == {first, second}, owners  # spread, each run with one owner

        # A cancellation reaches the run's owner, whichever supervisor that is.
        [cancelled] = [run_id for run_id in checking if owners[run_id] == second][:1]
        answer = client.post(f"/runs/{cancelled}/cancel", headers=auth(DEMO_KEY))
        assert (answer.status_code, answer.json()["cancel"]) == (200, "cancelled"), answer.text
        live = [run_id for run_id in checking if run_id != cancelled]

        ray.kill(ray.get_actor(second, namespace=NAMESPACE), no_restart=True)  # gone for good
        not_ready = client.get("/readyz")
        assert not_ready.status_code == 503, not_ready.text
        assert not_ready.json()["checks"][f"supervisor:{second}"]["ok"] is False

        # New runs: the dead supervisor is found by one submission at most (a 503 its client retries), then
        # passed over; the others go to the one alive.
        submitted = [
            client.post("/runs", json={"case_id": "C-102"}, headers=auth(DEMO_KEY)) for _ in range(4)
        ]
        refused = [answer for answer in submitted if answer.status_code != 201]
        assert len(refused) <= 1, [answer.text for answer in submitted]
        for answer in refused:
            assert problem(answer) == (503, "supervisor-unavailable"), answer.text
            assert answer.headers["retry-after"]
        reads = [answer.json()["run_id"] for answer in submitted if answer.status_code == 201]
        assert {asyncio.run(run_owner(scratch_dsn, run_id)) for run_id in reads} == {first}

        # The dead supervisor's live runs are taken over by the survivor, and end as they would have.
        deadline = time.monotonic() + 60
        while {asyncio.run(run_owner(scratch_dsn, run_id)) for run_id in live} - {None} != {first}:
            assert time.monotonic() < deadline, "the survivor never took the dead supervisor's runs over"
            time.sleep(0.25)
        # The runs waiting for a person are parked: nobody's, so no supervisor's death touches them, and a
        # decision wakes each under the survivor.
        for run_id in acting:
            wait_for(client, run_id, waiting, within_s=90)
        sends = {run_id: operations(client, run_id)[SEND] for run_id in acting}
        for run_id, send in sends.items():
            assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        ended = {
            run_id: wait_for(client, run_id, finished, within_s=90) for run_id in [*acting, *live, *reads]
        }
        refused_cancel = client.post(f"/runs/{live[0]}/cancel", headers=auth(DEMO_KEY))

    assert {run["status"] for run in ended.values()} == {"completed"}, ended
    assert len(ended) >= 9
    assert [sent(dsn, send) for send in sends.values()] == [1, 1, 1]  # each write executed once
    assert tools.server.calls.get(SEND, 0) == 3
    assert refused_cancel.json()["cancel"] == "already_finished"
    assert problem(client_get_unknown(base)) == (404, "run-not-found")


def client_get_unknown(base: str) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as client:
        return client.get("/runs/00000000-0000-4000-8000-000000000000", headers=auth(DEMO_KEY))


def test_every_read_is_answered_with_the_first_supervisor_gone_for_good(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """Issue 35, item 12: the nodes of a run were read with the tools the *first* supervisor offers, so with it
    gone every ``GET /runs/{id}/nodes`` answered 503 while ``/runs/{id}`` answered 200."""
    import ray

    tools: RunningToolServer = start_tool_server()
    config = replace(api_config(scratch_dsn, tools.url, token_key, lease_s=3.0), supervisors=2)
    first, _ = config.supervisor_names
    base = serve_api(config)
    with httpx.Client(base_url=base, timeout=30) as client:
        created = client.post("/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY))
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        assert created.json()["status"] == "completed", created.text

        ray.kill(ray.get_actor(first, namespace=NAMESPACE), no_restart=True)  # gone for good
        reads = {
            path: [client.get(path, headers=auth(DEMO_KEY)) for _ in range(3)]
            for path in (f"/runs/{run_id}", f"/runs/{run_id}/nodes", f"/runs/{run_id}/events")
        }
        cancelled = client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))

    assert {path: [answer.status_code for answer in answers] for path, answers in reads.items()} == {
        path: [200, 200, 200] for path in reads
    }
    nodes = reads[f"/runs/{run_id}/nodes"][-1].json()
    assert {node["node_id"] for node in nodes} >= {"case", "policy", "docs"}
    # A finished run has no owner: any supervisor alive says so, not the first one.
    assert (cancelled.status_code, cancelled.json().get("cancel")) == (200, "already_finished"), (
        cancelled.text
    )

"""Plan review over the real API, supervisor, PostgreSQL and caseops server: a reviewed run calls no tool until a
person approved its exact plan. Calls are counted on the tool server's side, never in raydag's records."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from actors.launch.settings import DEV_API_KEYS
from dag.policy import TenantPolicy
from dag.review import plan_hash
from tests.c102 import C102_RESULT
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, OTHER_KEY, SELF_APPROVER_KEY, auth, raydag_cli
from tests.integration.headless import Chromium
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import finished, own_api, problem, wait_for, waiting
from tests.integration.test_viewer import view_url

REVIEWED = {"case_id": "C-102", "review": "plan"}


def reviews(client: httpx.Client, run_id: str, key: str = DEMO_KEY) -> list[dict[str, Any]]:
    answer = client.get(f"/runs/{run_id}/reviews", headers=auth(key))
    assert answer.status_code == 200, answer.text
    listed: list[dict[str, Any]] = answer.json()
    return listed


def decide(
    client: httpx.Client, run_id: str, review: dict[str, Any], verdict: str, key: str, **body: Any
) -> httpx.Response:
    return client.post(
        f"/runs/{run_id}/reviews/{review['round']}/{verdict}",
        json={"plan_hash": review["plan_hash"], **body},
        headers=auth(key),
    )


def kinds(client: httpx.Client, run_id: str) -> list[str]:
    """The kinds of the run's recorded events, in order."""
    answer = client.get(f"/runs/{run_id}/events", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    return [event["kind"] for event in answer.json()]


def waiting_review(client: httpx.Client, body: dict[str, Any] = REVIEWED) -> tuple[str, dict[str, Any]]:
    """A new run of ``body``, once it waits for its first plan's review; and that review."""
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    wait_for(client, run_id, waiting)
    [review] = reviews(client, run_id)
    return run_id, review


@pytest.fixture
def api(ray_cluster: None, scratch_dsn: str, start_tool_server: Any, token_key: bytes, serve_api: Any) -> Any:  # noqa: F811
    """An API of the test's own over a caseops server of its own: its URL, the tool server, its supervisor."""
    return own_api(start_tool_server, scratch_dsn, token_key, serve_api)


def test_a_reviewed_plan_calls_nothing_until_a_person_approves_its_exact_text(api: Any) -> None:
    base, tools, _ = api
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, review = waiting_review(client)
        time.sleep(1.0)  # long enough for a dispatch that should not happen to happen
        assert tools.server.calls == {}
        assert (review["state"], review["round"], review["plan_hash"]) == (
            "awaiting",
            1,
            plan_hash(review["plan"]),
        )
        assert review["nodes"] == [node["id"] for node in review["plan"]["nodes"]]
        assert review["requested_by"] == f"tenant-demo/{DEV_API_KEYS[DEMO_KEY].subject}"

        stale = client.post(
            f"/runs/{run_id}/reviews/1/approve", json={"plan_hash": "0" * 64}, headers=auth(APPROVER_KEY)
        )
        assert problem(stale) == (409, "review-hash-mismatch")
        assert problem(decide(client, run_id, review, "approve", DEMO_KEY)) == (403, "scope-missing")
        assert problem(decide(client, run_id, review, "approve", SELF_APPROVER_KEY)) == (
            403,
            "review-self-approval",
        )
        assert problem(decide(client, run_id, review, "approve", OTHER_KEY)) == (403, "scope-missing")
        missing = client.post(
            f"/runs/{run_id}/reviews/2/approve",
            json={"plan_hash": review["plan_hash"]},
            headers=auth(APPROVER_KEY),
        )
        assert problem(missing) == (404, "review-not-found")
        assert tools.server.calls == {}  # no refused decision let anything through

        approved = decide(client, run_id, review, "approve", APPROVER_KEY, note="reads only")
        assert approved.status_code == 200, approved.text
        assert problem(decide(client, run_id, review, "approve", APPROVER_KEY)) == (
            409,
            "review-already-decided",
        )
        run = wait_for(client, run_id, finished)
        [decided] = reviews(client, run_id)
        nodes = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()

    assert (run["status"], run["result"]) == ("completed", C102_RESULT), run
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "approved",
        "person:tenant-demo/approver",
        "reads only",
    )
    # Once each call the run made (a fan-out's parent calls nothing itself): approving re-ran nothing.
    made: Counter[str] = Counter()
    for node in nodes:
        made[node["tool"]] += node["attempts"]
    assert tools.server.calls == +made, (tools.server.calls, nodes)


def test_a_rejected_plan_calls_nothing_and_the_run_says_who_rejected_it(api: Any, scratch_dsn: str) -> None:
    import ray

    base, tools, supervisor = api
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, review = waiting_review(client)
        # The run waiting is woken by the decision: its supervisor listens for them on a connection of its own.
        owner = ray.get(supervisor.ping.remote())["owner"]
        assert asyncio.run(listening_as(scratch_dsn, f"{owner}:decisions")), owner
        rejected = decide(client, run_id, review, "reject", APPROVER_KEY, note="wrong case")
        assert rejected.status_code == 200, rejected.text
        run = wait_for(client, run_id, finished)
        late = decide(client, run_id, review, "approve", APPROVER_KEY)

    assert (run["status"], run["stop_reason"]) == ("stopped", "PLAN_REJECTED"), run
    assert "person:tenant-demo/approver" in run["detail"]
    assert "wrong case" in run["detail"]
    assert problem(late) == (409, "review-already-decided")
    assert tools.server.calls == {}


async def listening_as(dsn: str, application_name: str) -> bool:
    """Whether a session named ``application_name`` listens on the database (its last statement a LISTEN)."""
    connection = await asyncpg.connect(dsn)
    try:
        found: bool = await connection.fetchval(
            """SELECT count(*) > 0 FROM pg_stat_activity
               WHERE datname = current_database() AND application_name = $1 AND query ILIKE 'LISTEN%'""",
            application_name,
        )
        return found
    finally:
        await connection.close()


def test_a_supervisor_killed_while_a_plan_waits_for_review_loses_nothing_and_runs_it_once(api: Any) -> None:
    import ray

    base, tools, supervisor = api
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, review = waiting_review(client)
        deadline = time.monotonic() + 60
        while "run_parked" not in kinds(client, run_id):  # nobody holds the run while it waits
            assert time.monotonic() < deadline, kinds(client, run_id)
            time.sleep(0.2)
        ray.kill(supervisor, no_restart=False)  # Ray restarts it
        time.sleep(1.0)  # time enough to ask again, if it wrongly would
        again = client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY)).json()
        assert reviews(client, run_id) == [review]  # the same plan, hash and deadline: asked once
        assert kinds(client, run_id).count("plan_review_requested") == 1
        assert "run_recovered" not in kinds(client, run_id)  # a parked run is nobody's to recover
        assert tools.server.calls == {}
        assert decide(client, run_id, review, "approve", APPROVER_KEY).status_code == 200
        run = wait_for(client, run_id, finished, within_s=120)

    assert again["status"] == "waiting"
    assert (run["status"], run["result"]) == ("completed", C102_RESULT), run


def test_a_tenant_that_requires_review_gets_it_unasked_and_an_undecided_plan_expires(
    ray_cluster: None,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    strict = TenantPolicy(plan_review=True)
    base, tools, _ = own_api(
        start_tool_server, scratch_dsn, token_key, serve_api, tenant_policies=(("tenant-demo", strict),)
    )
    with httpx.Client(base_url=base, timeout=30) as client:
        body = {"case_id": "C-102", "budgets": {"review_wait_s": 2}}  # no "review": the tenant requires it
        run_id, review = waiting_review(client, body)
        run = wait_for(client, run_id, finished)
        [expired] = reviews(client, run_id)
        late = decide(client, run_id, review, "approve", APPROVER_KEY)

    assert (run["status"], run["stop_reason"]) == ("stopped", "REVIEW_EXPIRED"), run
    assert expired["state"] == "expired"
    assert expired["decided_by"].startswith("supervisor:")
    assert problem(late) == (409, "review-expired")
    assert tools.server.calls == {}


def test_a_replan_waits_again_only_for_calls_no_earlier_yes_covered_and_each_yes_binds_its_own_plan(
    ray_cluster: None,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    planner = "tests.planners:ReplanningReader"
    base, tools, _ = own_api(start_tool_server, scratch_dsn, token_key, serve_api, planners=(planner,))
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, first = waiting_review(client, {**REVIEWED, "planner": "replanning-reader"})
        assert first["nodes"] == ["case"]
        assert decide(client, run_id, first, "approve", APPROVER_KEY).status_code == 200

        deadline = time.monotonic() + 60  # round 2: the case again, and the policy
        while len(listed := reviews(client, run_id)) < 2:
            assert time.monotonic() < deadline, listed
            time.sleep(0.1)
        second = listed[1]
        assert (second["round"], second["state"], second["nodes"]) == (2, "awaiting", ["policy"])
        assert tools.server.calls == {"caseops_get_case_snapshot": 1}  # round 2 has not begun
        stale = client.post(
            f"/runs/{run_id}/reviews/2/approve",
            json={"plan_hash": first["plan_hash"]},
            headers=auth(APPROVER_KEY),
        )
        assert problem(stale) == (409, "review-hash-mismatch")  # round 1's yes is no yes to round 2's plan
        assert decide(client, run_id, second, "approve", APPROVER_KEY).status_code == 200
        run = wait_for(client, run_id, finished)

    assert run["status"] == "completed", run
    # The repeated read was the same action: reused from round 1, not called again.
    assert tools.server.calls == {"caseops_get_case_snapshot": 1, "caseops_get_policy_requirements": 1}


def test_a_person_reviews_a_plan_from_the_terminal(api: Any) -> None:
    base, tools, _ = api

    def reviews_cli(*args: str, key: str = APPROVER_KEY) -> subprocess.CompletedProcess[str]:
        return raydag_cli("reviews", *args, url=base, key=key)

    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, review = waiting_review(client)
        listed = reviews_cli("list", run_id, "--json")
        table = reviews_cli("list", run_id)
        stale = reviews_cli("approve", run_id, "1", "--hash", "0" * 64)
        unauthorized = reviews_cli("approve", run_id, "1", "--hash", review["plan_hash"], key=DEMO_KEY)
        approved = reviews_cli("approve", run_id, "1", "--hash", review["plan_hash"], "--note", "ok")
        run = wait_for(client, run_id, finished)

    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [review]
    assert review["plan_hash"] in table.stdout
    assert (stale.returncode, "review-hash-mismatch" in stale.stderr) == (2, True), stale.stderr
    assert (unauthorized.returncode, "scope-missing" in unauthorized.stderr) == (2, True), unauthorized.stderr
    assert approved.returncode == 0, approved.stderr
    assert "round 1's plan is approved, by person:tenant-demo/approver" in approved.stdout
    assert run["status"] == "completed"
    assert sum(tools.server.calls.values()) > 0


def test_the_viewer_shows_a_plan_waiting_for_review_and_then_who_approved_it(
    api: Any, tmp_path: Path
) -> None:
    base, _, _ = api
    row = "document.querySelector('[data-review-round=\"1\"]')"
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, review = waiting_review(client)
        with Chromium(tmp_path / "chromium") as browser:
            browser.open(view_url(base, run_id))
            browser.wait_for(f"{row} !== null && {row}.dataset.reviewState === 'awaiting'")
            waiting_status = browser.evaluate("document.body.dataset.runStatus")
            assert decide(client, run_id, review, "approve", APPROVER_KEY).status_code == 200
            browser.wait_for("document.body.dataset.runStatus === 'completed'")
            browser.wait_for(f"{row}.dataset.reviewState === 'approved'")
            decided_by = browser.evaluate(f"{row}.dataset.decidedBy")

    assert waiting_status == "waiting"
    assert decided_by == "person:tenant-demo/approver"

"""Writes through the operation ledger, over the real API, supervisor, PostgreSQL and caseops' MCP server.

Case C-103 misses its accident certificate. A run of stage ``act`` checks it, then drafts a request to the
claimant (approved by the policy) and waits for a person to approve sending it (an irreversible write). Every
effect is counted where it happens: rows of caseops' ``document_request_outbox`` and the tool server's own
count of calls that reached the send handler, never raydag's ledger.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from actors.launch.settings import DEV_API_KEYS
from actors.supervisor import NAMESPACE
from dag.budget import BudgetRequest, Budgets
from dag.contracts import Risk
from dag.policy import TenantPolicy
from tests.caseops import copy_case
from tests.conftest import REPO
from tests.integration.conftest import (
    APPROVER_KEY,
    DEMO_KEY,
    OTHER_APPROVER_KEY,
    SELF_APPROVER_KEY,
    RunningToolServer,
    auth,
)
from tests.integration.headless import Chromium
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_viewer import view_url

SEND = "caseops_send_document_request"
DRAFT = "caseops_draft_document_request"
ACT = {"case_id": "C-103", "stage": "act"}
"""A run that may act on C-103: for a test with a ledger of its own (``own_api``). A send is one business intent
per case across runs, so on the session's ledger a test acts on a case of its own (``act_on_a_copy``)."""


def draft_then_send(case: str) -> list[dict[str, Any]]:
    """Plan nodes that draft a request for C-103's missing certificate (on ``case``) and send it."""
    return [
        {
            "id": "draft",
            "tool": DRAFT,
            "args": {"case_id": case, "missing_document_codes": ["ACCIDENT_CERTIFICATE"]},
        },
        {
            "id": "send",
            "tool": SEND,
            "args": {"case_id": case, "draft_id": {"$ref": "draft", "pointer": "/draft_id"}},
        },
    ]


def act_on_a_copy(*dsns: str) -> dict[str, str]:
    """A run that may act on a new copy of C-103 (in each of ``dsns``): a send no other test made."""
    return {"case_id": asyncio.run(copy_case(*dsns)), "stage": "act"}


def wait_for(client: httpx.Client, run_id: str, done: Any, within_s: float = 60.0) -> dict[str, Any]:
    """The run once ``done(run)`` holds (polled), or the test fails naming what it was."""
    run: dict[str, Any] = {}
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        run = client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY)).json()
        if done(run):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not get there: {run}")


def waiting(run: dict[str, Any]) -> bool:
    return bool(run["status"] == "waiting")


def finished(run: dict[str, Any]) -> bool:
    return run["finished_at"] is not None


def operations(client: httpx.Client, run_id: str, key: str = DEMO_KEY) -> dict[str, dict[str, Any]]:
    answer = client.get(f"/runs/{run_id}/operations", headers=auth(key))
    assert answer.status_code == 200, answer.text
    return {operation["tool"]: operation for operation in answer.json()}


def operations_of(client: httpx.Client, run_id: str, tool: str) -> list[dict[str, Any]]:
    """Every operation of ``tool`` in the run (``operations`` keeps one per tool)."""
    answer = client.get(f"/runs/{run_id}/operations", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    return [operation for operation in answer.json() if operation["tool"] == tool]


def decide(
    client: httpx.Client, run_id: str, operation: dict[str, Any], verb: str, key: str, **body: Any
) -> Any:
    payload = {"args_hash": operation["args_hash"], **body}
    return client.post(
        f"/runs/{run_id}/operations/{operation['operation_id']}/{verb}", json=payload, headers=auth(key)
    )


def problem(answer: httpx.Response) -> tuple[int, str]:
    assert answer.headers["content-type"] == "application/problem+json", answer.text
    return answer.status_code, answer.json()["type"].rsplit("/", 1)[-1]


async def requests_in_outbox(dsn: str, key: str) -> int:
    """Requests in caseops' outbox under idempotency key ``key`` (an operation's id)."""
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval(
            "SELECT count(*) FROM document_request_outbox WHERE idempotency_key = $1", key
        )
        return count
    finally:
        await connection.close()


def sent(dsn: str, operation: dict[str, Any]) -> int:
    """Requests in caseops' outbox under this operation's id (its idempotency key): the effect, counted at
    the tool's side."""
    return asyncio.run(requests_in_outbox(dsn, operation["operation_id"]))


def waiting_send(client: httpx.Client, body: dict[str, Any] = ACT) -> tuple[str, dict[str, Any]]:
    """A new run of stage ``act`` (over C-103 unless ``body`` says otherwise), once it waits for a person to
    approve its send; and that send."""
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    wait_for(client, run_id, waiting)
    return run_id, operations(client, run_id)[SEND]


def send_out_unanswered(
    client: httpx.Client, dsn: str, tools: RunningToolServer
) -> tuple[str, dict[str, Any]]:
    """A run whose approved send has committed on the tool's side and whose answer never comes: the run, and
    its send, ``executing`` in the ledger with its outcome unrecorded."""
    run_id, send = waiting_send(client)
    tools.server.simulate(stall_after_commit={SEND: 1})
    assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
    deadline = time.monotonic() + 30
    while sent(dsn, send) == 0:  # the tool server's database is the session's
        assert time.monotonic() < deadline, "the send never reached the outbox"
        time.sleep(0.05)
    assert operations(client, run_id)[SEND]["state"] == "executing"
    return run_id, send


@pytest.fixture
def acting_run(client: httpx.Client, dsn: str) -> Iterator[str]:
    """A run of stage ``act`` over a copy of C-103 of its own, waiting for a person to approve its send."""
    run_id, _ = waiting_send(client, act_on_a_copy(dsn))
    yield run_id
    client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))


def test_a_run_that_may_act_waits_for_a_person_then_sends_exactly_one_request(
    client: httpx.Client, dsn: str, acting_run: str, tool_server: RunningToolServer
) -> None:
    listed = operations(client, acting_run)
    draft, send = listed[DRAFT], listed[SEND]
    assert (draft["approval"], draft["state"]) == ("policy", "succeeded")
    assert (send["approval"], send["state"], send["risk"]) == (
        "person",
        "awaiting_approval",
        "irreversible_write",
    )
    case = client.get(f"/runs/{acting_run}", headers=auth(DEMO_KEY)).json()["resource"]["case_id"]
    assert send["args"] == {"case_id": case, "draft_id": draft["output"]["draft_id"]}  # no key: raydag's
    assert [step["to"] for step in send["history"]] == ["proposed", "validated", "awaiting_approval"]
    assert sent(dsn, send) == 0  # nothing is sent while it waits
    calls_before = tool_server.server.calls.get(SEND, 0)

    def approve() -> httpx.Response:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as other:
            return decide(other, acting_run, send, "approve", APPROVER_KEY, note="the certificate is due")

    with ThreadPoolExecutor(2) as pool:  # two people approve at once: one decision, one refusal
        answers = sorted(pool.map(lambda _: approve(), range(2)), key=lambda answer: answer.status_code)
    assert answers[0].status_code == 200, answers[0].text
    assert problem(answers[1]) == (409, "operation-already-decided")

    run = wait_for(client, acting_run, finished)
    assert (run["status"], run["stop_reason"]) == ("completed", None), run
    request = run["result"]["document_request"]
    assert run["result"]["missing_document_codes"] == ["ACCIDENT_CERTIFICATE"]
    assert sent(dsn, send) == 1
    assert tool_server.server.calls.get(SEND, 0) - calls_before == 1  # one call reached the handler
    done = operations(client, acting_run)[SEND]
    assert (done["state"], done["attempts"], done["output"]["request_id"]) == (
        "succeeded",
        1,
        request["request_id"],
    )
    approved = next(step for step in done["history"] if step["to"] == "approved")
    assert (approved["actor"], approved["note"]) == ("person:tenant-demo/approver", "the certificate is due")


def test_a_decision_quoting_another_hash_or_from_the_wrong_person_is_refused_and_changes_nothing(
    client: httpx.Client, dsn: str, acting_run: str
) -> None:
    send = operations(client, acting_run)[SEND]
    url = f"/runs/{acting_run}/operations/{send['operation_id']}/approve"

    stale = client.post(url, json={"args_hash": "0" * 64}, headers=auth(APPROVER_KEY))
    assert problem(stale) == (409, "operation-hash-mismatch")
    assert problem(decide(client, acting_run, send, "approve", DEMO_KEY)) == (403, "scope-missing")
    assert problem(decide(client, acting_run, send, "approve", SELF_APPROVER_KEY)) == (
        403,
        "operation-self-approval",
    )
    assert problem(decide(client, acting_run, send, "approve", OTHER_APPROVER_KEY)) == (404, "run-not-found")
    unknown = f"/runs/{acting_run}/operations/{uuid.uuid4()}/approve"
    assert problem(
        client.post(unknown, json={"args_hash": send["args_hash"]}, headers=auth(APPROVER_KEY))
    ) == (
        404,
        "operation-not-found",
    )
    malformed = client.post(url, json={"args_hash": "x"}, headers=auth(APPROVER_KEY))
    assert problem(malformed) == (422, "invalid-request")
    resolved = decide(client, acting_run, send, "resolve", APPROVER_KEY, outcome="succeeded", note="n")
    assert problem(resolved) == (409, "operation-not-unknown")

    assert operations(client, acting_run)[SEND]["state"] == "awaiting_approval"
    assert client.get(f"/runs/{acting_run}", headers=auth(DEMO_KEY)).json()["status"] == "waiting"
    assert sent(dsn, send) == 0


def test_a_rejected_send_is_never_executed_and_the_run_says_so(
    client: httpx.Client, dsn: str, acting_run: str
) -> None:
    send = operations(client, acting_run)[SEND]

    assert decide(client, acting_run, send, "reject", APPROVER_KEY, note="wrong claimant").status_code == 200

    run = wait_for(client, acting_run, finished)
    assert (run["status"], run["stop_reason"]) == ("needs_human", "OPERATION_REJECTED"), run
    assert run["result"]["outcome"] == "MISSING_REQUIRED_DOCUMENTS"
    assert operations(client, acting_run)[SEND]["state"] == "rejected"
    assert problem(decide(client, acting_run, send, "approve", APPROVER_KEY)) == (
        409,
        "operation-already-decided",
    )
    assert sent(dsn, send) == 0


def test_a_send_nobody_approves_within_its_approval_budget_expires_and_stops_the_run(
    client: httpx.Client, dsn: str
) -> None:
    body = {**act_on_a_copy(dsn), "budgets": {"approval_wait_s": 2}}
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]

    run = wait_for(client, run_id, finished, within_s=60)

    assert (run["status"], run["stop_reason"]) == ("stopped", "APPROVAL_EXPIRED"), run
    send = operations(client, run_id)[SEND]
    assert send["state"] == "expired"
    assert problem(decide(client, run_id, send, "approve", APPROVER_KEY)) == (409, "operation-expired")
    assert sent(dsn, send) == 0


def test_a_person_may_take_longer_than_the_runs_own_deadline_and_the_run_completes(
    client: httpx.Client, dsn: str
) -> None:
    """The run's deadline measures its own work: parked while its send waits for a person, its clock stands
    still, and a yes given well past ``deadline_s`` is executed once."""
    body = {**act_on_a_copy(dsn), "budgets": {"deadline_s": 3}}
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    wait_for(client, run_id, waiting)
    send = operations(client, run_id)[SEND]
    time.sleep(6)  # twice the run's deadline: a person reading

    assert client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY)).json()["status"] == "waiting"
    assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
    run = wait_for(client, run_id, finished, within_s=60)

    assert (run["status"], run["stop_reason"]) == ("completed", None), run
    assert sent(dsn, send) == 1


def test_a_send_that_commits_and_then_times_out_is_reconciled_not_retried(
    client: httpx.Client, dsn: str, acting_run: str, simulated: RunningToolServer
) -> None:
    send = operations(client, acting_run)[SEND]
    simulated.server.simulate(stall_after_commit={SEND: 1})
    calls_before = simulated.server.calls.get(SEND, 0)

    assert decide(client, acting_run, send, "approve", APPROVER_KEY).status_code == 200

    run = wait_for(client, acting_run, finished, within_s=90)
    assert (run["status"], run["stop_reason"]) == ("completed", None), (run, operations(client, acting_run))
    assert sent(dsn, send) == 1
    assert (
        simulated.server.calls.get(SEND, 0) - calls_before == 1
    )  # the timeout was not answered with a second send
    done = operations(client, acting_run)[SEND]
    assert [step["to"] for step in done["history"]][-3:] == ["executing", "unknown", "succeeded"]
    assert done["history"][-1]["actor"] == "reconcile:caseops_find_document_request"
    assert run["result"]["document_request"]["request_id"] == done["output"]["request_id"]
    assert done["error"] is None  # the timeout was no failure


def test_a_run_of_the_default_stage_is_never_offered_a_write(client: httpx.Client) -> None:
    draft = {"id": "d", "tool": DRAFT, "args": {"case_id": "C-103", "missing_document_codes": ["X"]}}
    plan = {"nodes": [{"id": "c", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-103"}}, draft]}
    created = client.post("/runs?wait=30", json={"case_id": "C-103", "plan": plan}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    nodes = client.get(f"/runs/{created.json()['run_id']}/nodes", headers=auth(DEMO_KEY)).json()

    assert [(node["status"], node["decision"]["rule_id"]) for node in nodes] == [
        ("succeeded", "allow.read_only_in_scope"),
        ("denied", "stage.not_allowed"),
    ]
    assert operations(client, created.json()["run_id"]) == {}
    unknown = client.post("/runs", json={"case_id": "C-103", "stage": "deploy"}, headers=auth(DEMO_KEY))
    assert problem(unknown) == (422, "unknown-stage")


# ------------------------------------------------------------------ recovery


def own_api(
    start_tool_server: Any,
    scratch_dsn: str,
    token_key: bytes,
    start_api: Any,
    toolsets_for: Any = None,
    **supervisor: Any,
) -> tuple[str, RunningToolServer, Any]:
    """An API of the test's own (its supervisor may be killed), over a tool server of its own: its URL, the
    tool server, and the supervisor's actor. ``toolsets_for(url)``: the toolsets over that server (default:
    the shipped caseops); ``supervisor`` overrides other ``SupervisorConfig`` fields."""
    import ray

    tools: RunningToolServer = start_tool_server()
    if toolsets_for is not None:
        supervisor["toolsets"] = toolsets_for(tools.url)
    config = api_config(scratch_dsn, tools.url, token_key, **supervisor)
    return start_api(config), tools, ray.get_actor(config.supervisor_name, namespace=NAMESPACE)


def test_a_tenants_policy_sets_how_long_its_people_have_and_a_request_may_ask_up_to_the_limit(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """A budget a run does not ask for is its tenant's default; one it asks for may be above any default, up
    to the server's limit; an approval nobody gives within the tenant's window expires the write."""
    quick = TenantPolicy(budgets=BudgetRequest(approval_wait_s=3))
    limits = Budgets(deadline_s=600, approval_wait_s=30 * 86_400)
    base, _, _ = own_api(
        start_tool_server,
        scratch_dsn,
        token_key,
        serve_api,
        limits=limits,
        defaults=Budgets(),
        tenant_policies=(("tenant-demo", quick),),
    )
    with httpx.Client(base_url=base, timeout=30) as client:
        longer = client.post(
            "/runs", json={"case_id": "C-102", "budgets": {"deadline_s": 600}}, headers=auth(DEMO_KEY)
        )
        beyond = client.post(
            "/runs", json={"case_id": "C-102", "budgets": {"deadline_s": 601}}, headers=auth(DEMO_KEY)
        )
        run_id, send = waiting_send(client)
        run = wait_for(client, run_id, finished, within_s=60)
        created = client.get(f"/runs/{run_id}/events", headers=auth(DEMO_KEY)).json()[0]

    assert longer.status_code == 201, longer.text  # above the default (120 s), within the limit
    assert problem(beyond) == (422, "budget-above-limit")
    assert (created["budgets"]["approval_wait_s"], created["budgets"]["deadline_s"]) == (3, 120)
    assert (run["status"], run["stop_reason"]) == ("stopped", "APPROVAL_EXPIRED"), run
    assert sent(dsn, send) == 0


def test_a_tenant_may_let_requesters_approve_their_own_irreversible_writes_and_others_still_may_not(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    lenient = TenantPolicy(self_approval=frozenset({Risk.IRREVERSIBLE_WRITE}))
    base, _, _ = own_api(
        start_tool_server, scratch_dsn, token_key, serve_api, tenant_policies=(("tenant-demo", lenient),)
    )
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = waiting_send(client)
        assert problem(decide(client, run_id, send, "approve", DEMO_KEY)) == (403, "scope-missing")
        approved = decide(client, run_id, send, "approve", SELF_APPROVER_KEY)  # the run's own principal
        assert approved.status_code == 200, approved.text
        run = wait_for(client, run_id, finished)

    assert run["status"] == "completed", run
    assert approved.json()["history"][-1]["actor"] == f"person:tenant-demo/{DEV_API_KEYS[DEMO_KEY].subject}"
    assert sent(dsn, send) == 1


def test_a_supervisor_killed_after_the_send_committed_recovers_the_run_and_the_request_exists_once(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    import ray

    base, tools, supervisor = own_api(start_tool_server, scratch_dsn, token_key, serve_api)
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = send_out_unanswered(client, dsn, tools)
        ray.kill(supervisor, no_restart=False)  # with the call out and its outcome unrecorded

        run = wait_for(client, run_id, finished, within_s=120)

    assert (run["status"], run["stop_reason"]) == ("completed", None), run
    assert sent(dsn, send) == 1
    assert tools.server.calls.get(SEND, 0) == 1  # recovery reconciled; it did not send again
    history = [(step["from"], step["to"]) for step in operations_after(base, run_id)[SEND]["history"]]
    assert ("executing", "unknown") in history
    assert history[-1] == ("unknown", "succeeded")


def test_two_live_supervisors_recovering_a_dead_ones_send_execute_it_once(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """Three supervisors share one database. The one driving the run dies with its send out; the two others,
    alive, both sweep the ledger and race to take the run over: the request still exists once."""
    import ray

    tools: RunningToolServer = start_tool_server()
    # Leases of 3 s: the dead owner's run lapses to the others in seconds, not the default 15.
    first, *others = [api_config(scratch_dsn, tools.url, token_key, lease_s=3.0) for _ in range(3)]
    survivors = [serve_api(config) for config in others]  # both live, listing and sweeping, before the death
    base = serve_api(first)
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = send_out_unanswered(client, dsn, tools)
    # Gone for good at once: before its own call's time limit could let it settle the send itself.
    ray.kill(ray.get_actor(first.supervisor_name, namespace=NAMESPACE), no_restart=True)
    with httpx.Client(base_url=survivors[0], timeout=30) as survivor:
        run = wait_for(survivor, run_id, finished, within_s=180)

    assert (run["status"], run["stop_reason"]) == ("completed", None), run
    assert sent(dsn, send) == 1
    assert tools.server.calls.get(SEND, 0) == 1  # reconciled by a read; never sent again
    assert asyncio.run(run_owner(scratch_dsn, run_id)) in {config.supervisor_name for config in others}
    history = [(step["from"], step["to"]) for step in operations_after(survivors[1], run_id)[SEND]["history"]]
    assert history.count(("unknown", "succeeded")) == 1, history
    assert history[-1] == ("unknown", "succeeded"), history


async def run_owner(dsn: str, run_id: str) -> str | None:
    """The supervisor that holds the run's lease now, as PostgreSQL records it."""
    connection = await asyncpg.connect(dsn)
    try:
        owner: str | None = await connection.fetchval(
            "SELECT owner FROM runs WHERE run_id = $1", uuid.UUID(run_id)
        )
        return owner
    finally:
        await connection.close()


def operations_after(base: str, run_id: str) -> dict[str, dict[str, Any]]:
    with httpx.Client(base_url=base, timeout=30) as client:
        return operations(client, run_id)


# ------------------------------------------------------------------ the command line


def test_raydag_approvals_lists_refuses_a_stale_hash_and_approves_through_the_api(
    api: str, client: httpx.Client, dsn: str, acting_run: str
) -> None:
    raydag = str(Path(sys.executable).parent / "raydag")

    def approvals(*args: str, key: str = APPROVER_KEY) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [raydag, "approvals", *args, "--url", api, "--api-key", key],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    listed = approvals("list", acting_run, "--json")
    assert listed.returncode == 0, listed.stderr
    send = next(operation for operation in json.loads(listed.stdout) if operation["tool"] == SEND)
    assert send["state"] == "awaiting_approval"
    shown = approvals("list", acting_run).stdout  # every id and hash whole, whatever the terminal's width
    block = shown[shown.index(f"operation {send['operation_id']}  awaiting_approval") :].split("\n\n")[0]
    assert f"hash      {send['args_hash']}" in block, shown
    assert "runs      1\n" in block + "\n", shown  # no other run shares it

    stale = approvals("approve", acting_run, send["operation_id"], "--hash", "0" * 64)
    unauthorized = approvals(
        "approve", acting_run, send["operation_id"], "--hash", send["args_hash"], key=DEMO_KEY
    )
    approved = approvals(
        "approve", acting_run, send["operation_id"], "--hash", send["args_hash"], "--note", "ok"
    )

    assert (stale.returncode, "operation-hash-mismatch" in stale.stderr) == (2, True), stale.stderr
    assert (unauthorized.returncode, "scope-missing" in unauthorized.stderr) == (2, True), unauthorized.stderr
    assert approved.returncode == 0, approved.stderr
    assert "approved, by person:tenant-demo/approver" in approved.stdout
    run = wait_for(client, acting_run, finished)
    assert run["status"] == "completed"
    assert sent(dsn, send) == 1


# ------------------------------------------------------------------ the run viewer


def test_the_viewer_shows_what_waits_for_a_person_and_then_who_approved_it(
    api: str, client: httpx.Client, acting_run: str, tmp_path: Path
) -> None:
    send = operations(client, acting_run)[SEND]
    row = f"document.querySelector('[data-operation=\"{send['operation_id']}\"]')"

    with Chromium(tmp_path / "chromium") as browser:
        browser.open(view_url(api, acting_run))
        browser.wait_for(f"{row} !== null && {row}.dataset.operationState === 'awaiting_approval'")
        waiting_status = browser.evaluate("document.body.dataset.runStatus")
        assert decide(client, acting_run, send, "approve", APPROVER_KEY, note="seen").status_code == 200
        browser.wait_for("document.body.dataset.runStatus === 'completed'")
        browser.wait_for(f"{row}.dataset.operationState === 'succeeded'")
        decided_by = browser.evaluate(f"{row}.dataset.decidedBy")

    assert waiting_status == "waiting"
    assert decided_by == "person:tenant-demo/approver"


def test_a_send_out_when_its_run_was_cancelled_is_settled_by_the_sweep_not_left_executing(
    client: httpx.Client, dsn: str, acting_run: str, simulated: RunningToolServer
) -> None:
    send = operations(client, acting_run)[SEND]
    simulated.server.simulate(stall_after_commit={SEND: 1})
    assert decide(client, acting_run, send, "approve", APPROVER_KEY).status_code == 200
    deadline = time.monotonic() + 30
    while sent(dsn, send) == 0:  # the send committed; its answer never comes
        assert time.monotonic() < deadline, "the send never reached the outbox"
        time.sleep(0.05)

    cancelled = client.post(f"/runs/{acting_run}/cancel", headers=auth(DEMO_KEY)).json()
    assert cancelled["status"] == "cancelled"
    assert operations(client, acting_run)[SEND]["state"] == "unknown"  # the run stopped with it out

    deadline = time.monotonic() + 60  # the supervisors' sweep runs every SWEEP_S
    while (settled := operations(client, acting_run)[SEND])["state"] == "unknown":
        assert time.monotonic() < deadline, settled
        time.sleep(0.5)
    assert settled["state"] == "succeeded"
    assert settled["history"][-1]["actor"] == "reconcile:caseops_find_document_request"
    assert sent(dsn, send) == 1


def test_a_run_parked_on_a_person_is_held_by_no_supervisor_and_a_decision_wakes_it_under_the_next(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    import ray

    base, _, supervisor = own_api(start_tool_server, scratch_dsn, token_key, serve_api)
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = waiting_send(client)
        deadline = time.monotonic() + 30
        while asyncio.run(run_owner(scratch_dsn, run_id)) is not None:  # parked: it lets its lease go
            assert time.monotonic() < deadline, "the waiting run was never parked"
            time.sleep(0.1)

        drained = ray.get(supervisor.drain.remote(30.0))  # a SIGTERM's drain: nothing of the run to hand over
        ray.kill(supervisor, no_restart=False)  # and the process goes; Ray starts another

        assert run_id not in drained.handed_over
        assert drained.abandoned == ()
        wait_for(client, run_id, waiting)  # parked still, and waiting on
        assert operations(client, run_id)[SEND]["state"] == "awaiting_approval"
        approved = decide(client, run_id, send, "approve", APPROVER_KEY)
        while approved.status_code == 503:  # the supervisor is starting again: as documented, retry after
            assert problem(approved) == (503, "supervisor-unavailable")
            time.sleep(float(approved.headers["retry-after"]))
            approved = decide(client, run_id, send, "approve", APPROVER_KEY)
        assert approved.status_code == 200, approved.text
        run = wait_for(client, run_id, finished)

    assert run["status"] == "completed", run
    assert sent(dsn, send) == 1


def test_while_a_write_waits_for_a_person_the_rest_of_the_dag_goes_on(client: httpx.Client, dsn: str) -> None:
    act = act_on_a_copy(dsn)
    case = act["case_id"]
    plan = {
        "nodes": [
            *draft_then_send(case),
            {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": case}},
            {"id": "policy", "tool": "caseops_get_policy_requirements", "args": {"case_id": case}},
        ]
    }
    created = client.post("/runs", json={**act, "plan": plan}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    wait_for(client, run_id, waiting)

    deadline = time.monotonic() + 30
    while True:  # the reads, which wait on nothing, end while the send waits
        nodes = {
            node["node_id"]: node["status"]
            for node in client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()
        }
        if nodes["case"] == nodes["policy"] == "succeeded":
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.1)
    assert (nodes["draft"], nodes["send"]) == ("succeeded", "running")
    assert client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY)).json()["status"] == "waiting"
    send = operations(client, run_id)[SEND]
    assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
    assert wait_for(client, run_id, finished)["status"] == "completed"
    assert sent(dsn, send) == 1


def test_an_unknown_send_with_no_read_to_reconcile_it_waits_for_a_person_to_resolve_it(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    from tests.integration.test_operation_faults import toolsets_with_a_short_send

    def unreconciled(url: str) -> Any:
        return toolsets_with_a_short_send(url, reconcile=False)

    base, tools, _ = own_api(start_tool_server, scratch_dsn, token_key, serve_api, unreconciled)
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = waiting_send(client)
        tools.server.simulate(stall_after_commit={SEND: 1})
        assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200

        deadline = time.monotonic() + 60
        while operations(client, run_id)[SEND]["state"] != "unknown":
            assert time.monotonic() < deadline, operations(client, run_id)[SEND]
            time.sleep(0.1)
        run = wait_for(client, run_id, waiting)  # nothing can tell: it waits for a person
        # Saying what a write did is deciding it: the run's requester may not, as for an approval.
        mine = decide(client, run_id, send, "resolve", SELF_APPROVER_KEY, outcome="succeeded", note="n")
        assert problem(mine) == (403, "operation-self-approval")
        resolved = decide(
            client, run_id, send, "resolve", APPROVER_KEY, outcome="succeeded", note="seen in the mailer"
        )
        assert resolved.status_code == 200, resolved.text
        run = wait_for(client, run_id, finished)

    assert sent(dsn, send) == 1
    assert tools.server.calls.get(SEND, 0) == 1  # never sent twice, unknown or not
    assert resolved.json()["history"][-1]["actor"] == "person:tenant-demo/approver"
    # The conformance planner answers only with what the send itself said: a resolution is no request to cite.
    assert (run["status"], run["stop_reason"]) == ("needs_human", "INSUFFICIENT_EVIDENCE"), run


def test_an_unknown_outcome_nobody_resolves_within_its_budget_stops_the_run_and_stays_unknown(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """The run waits for a person to say what the write did for ``resolution_wait_s``, parked; then it stops
    ``RESOLUTION_EXPIRED``, and the operation stays ``unknown``: the effect may exist, a person may still say."""
    from tests.integration.test_operation_faults import toolsets_with_a_short_send

    def unreconciled(url: str) -> Any:
        return toolsets_with_a_short_send(url, reconcile=False)

    base, tools, _ = own_api(start_tool_server, scratch_dsn, token_key, serve_api, unreconciled)
    with httpx.Client(base_url=base, timeout=30) as client:
        body = {**act_on_a_copy(dsn, scratch_dsn), "budgets": {"resolution_wait_s": 3}}
        run_id, send = waiting_send(client, body)
        tools.server.simulate(stall_after_commit={SEND: 1})
        assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        run = wait_for(client, run_id, finished, within_s=90)
        after = operations(client, run_id)[SEND]

    assert (run["status"], run["stop_reason"]) == ("stopped", "RESOLUTION_EXPIRED"), run
    assert after["state"] == "unknown"
    assert sent(dsn, send) == 1  # it did happen: nobody said so, and nothing sent it again
    assert tools.server.calls.get(SEND, 0) == 1


def test_a_replan_proposing_the_same_writes_reuses_them_and_changed_arguments_need_a_new_yes(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    planner = "tests.planners:ReplanningWriter"
    base, tools, _ = own_api(start_tool_server, scratch_dsn, token_key, serve_api, planners=(planner,))
    body = {**ACT, "planner": "replanning-writer"}
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = client.post("/runs", json=body, headers=auth(DEMO_KEY)).json()["run_id"]
        wait_for(client, run_id, waiting)
        first = operations(client, run_id)[SEND]
        assert decide(client, run_id, first, "approve", APPROVER_KEY).status_code == 200

        deadline = time.monotonic() + 60  # round 2: the changed send waits for its own yes
        while len(sends := operations_of(client, run_id, SEND)) < 2:
            assert time.monotonic() < deadline, sends
            time.sleep(0.1)
        wait_for(client, run_id, waiting)
        # Read again now that the run waits: the listing above may predate the request for a yes.
        second = next(
            op for op in operations_of(client, run_id, SEND) if op["operation_id"] != first["operation_id"]
        )
        assert second["state"] == "awaiting_approval"  # the first yes was for other arguments
        assert second["args_hash"] != first["args_hash"]
        assert problem(
            decide(client, run_id, second, "approve", APPROVER_KEY, args_hash=first["args_hash"])
        ) == (
            409,
            "operation-hash-mismatch",
        )
        assert decide(client, run_id, second, "approve", APPROVER_KEY).status_code == 200
        run = wait_for(client, run_id, finished)
        listed = client.get(f"/runs/{run_id}/operations", headers=auth(DEMO_KEY)).json()

    assert run["status"] == "completed", run
    assert len(listed) == 4  # two drafts, two sends: round 2's repeats are round 1's operations
    assert (sent(dsn, first), sent(dsn, second)) == (1, 1)
    assert tools.server.calls.get(SEND, 0) == 2

"""One intent, one effect, across runs (issue 36, item 5): an operation is the business intent — the tenant, the
tool and the arguments that name it — not the run that proposed it. Runs that propose the same intent share one
operation: they wait for one decision, one call acts, and each reads its outcome. Effects are counted where they
happen: caseops' own tables (``document_request_drafts``, ``document_request_outbox``) and the tool server's
count of calls that reached each handler, never raydag's ledger.

Each test acts on a copy of C-103 of its own (``copy_case``): on the session's ledger, a request for C-103's
missing certificate is one intent, which another test may already have sent.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import httpx

from actors.toolsets.config import parse_toolsets
from tests.caseops import copy_case
from tests.conftest import REPO
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, RunningToolServer, auth
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import (
    DRAFT,
    SEND,
    decide,
    finished,
    operations,
    problem,
    wait_for,
    waiting,
)


async def _effects(dsn: str, case_id: str) -> tuple[int, int]:
    connection = await asyncpg.connect(dsn)
    try:
        drafts: int = await connection.fetchval(
            "SELECT count(*) FROM document_request_drafts WHERE case_id = $1", case_id
        )
        sends: int = await connection.fetchval(
            "SELECT count(*) FROM document_request_outbox WHERE case_id = $1", case_id
        )
        return drafts, sends
    finally:
        await connection.close()


def effects(dsn: str, case_id: str) -> tuple[int, int]:
    """(drafts, requests sent) for the case, as caseops' own tables hold them."""
    return asyncio.run(_effects(dsn, case_id))


def created(client: httpx.Client, body: dict[str, Any], key: str = DEMO_KEY) -> str:
    answer = client.post("/runs", json=body, headers=auth(key))
    assert answer.status_code == 201, answer.text
    run_id: str = answer.json()["run_id"]
    return run_id


def at_once(client: httpx.Client, body: dict[str, Any], count: int) -> list[str]:
    """``count`` runs of ``body``, submitted at the same moment."""
    base = str(client.base_url)

    def submit(_: int) -> str:
        with httpx.Client(base_url=base, timeout=60) as own:
            return created(own, body)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(submit, range(count)))


def reached(client: httpx.Client, run_id: str, key: str, done: Any) -> dict[str, Any]:
    """The run, read with ``key``, once ``done(run)`` holds."""
    deadline = time.monotonic() + 60
    while not done(run := client.get(f"/runs/{run_id}", headers=auth(key)).json()):
        assert time.monotonic() < deadline, run
        time.sleep(0.1)
    return run


def calls(tools: RunningToolServer) -> tuple[int, int]:
    """(drafts, sends) that reached the tool server's handlers."""
    return tools.server.calls.get(DRAFT, 0), tools.server.calls.get(SEND, 0)


def test_three_runs_of_one_case_in_stage_act_approved_send_one_request(
    client: httpx.Client, dsn: str, tool_server: RunningToolServer
) -> None:
    """The newcomer's reproduction: three approved runs in stage ``act`` sent the claimant three requests."""
    case = asyncio.run(copy_case(dsn))
    before = calls(tool_server)

    runs = at_once(client, {"case_id": case, "stage": "act"}, 3)
    for run_id in runs:
        wait_for(client, run_id, waiting)
    sends = [operations(client, run_id)[SEND] for run_id in runs]

    assert len({send["operation_id"] for send in sends}) == 1  # one intent, one operation
    assert all(send["shared"] and send["state"] == "awaiting_approval" for send in sends)
    assert sorted(entry["run_id"] for entry in sends[0]["runs"]) == sorted(runs)
    assert effects(dsn, case) == (1, 0)  # one draft, shared too; nothing sent while it waits

    approvals = [
        decide(client, run_id, send, "approve", APPROVER_KEY)
        for run_id, send in zip(runs, sends, strict=True)
    ]
    ended = [wait_for(client, run_id, finished) for run_id in runs]

    assert [answer.status_code for answer in approvals] == [200, 409, 409]  # one decision, for every run
    assert problem(approvals[1]) == (409, "operation-already-decided")
    assert [run["status"] for run in ended] == ["completed"] * 3, ended
    assert effects(dsn, case) == (1, 1)
    after = calls(tool_server)
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)  # one call of each reached caseops
    requests = {run["result"]["document_request"]["request_id"] for run in ended}
    assert len(requests) == 1  # each run answers with the one request sent


def test_a_later_run_reads_a_succeeded_intent_without_a_call_and_both_runs_say_it_is_shared(
    client: httpx.Client, dsn: str, tool_server: RunningToolServer
) -> None:
    body = {"case_id": asyncio.run(copy_case(dsn)), "stage": "act"}
    first = created(client, body)
    wait_for(client, first, waiting)
    send = operations(client, first)[SEND]
    assert decide(client, first, send, "approve", APPROVER_KEY).status_code == 200
    earlier = wait_for(client, first, finished)
    before = calls(tool_server)

    later = created(client, body)
    run = wait_for(client, later, finished)

    assert (run["status"], run["stop_reason"]) == ("completed", None), run
    assert calls(tool_server) == before  # neither the draft nor the send was called again
    assert effects(dsn, body["case_id"]) == (1, 1)
    assert run["result"]["document_request"] == earlier["result"]["document_request"]
    kinds = [event["kind"] for event in client.get(f"/runs/{later}/events", headers=auth(DEMO_KEY)).json()]
    assert "run_waiting" not in kinds  # it read the outcome: nobody was asked again
    for run_id in (first, later):
        shared = operations(client, run_id)[SEND]
        assert (shared["operation_id"], shared["state"], shared["attempts"]) == (
            send["operation_id"],
            "succeeded",
            1,
        )
        assert shared["shared"] is True
        assert (shared["run_id"], [entry["run_id"] for entry in shared["runs"]]) == (first, [first, later])


def test_a_rejected_or_expired_intent_is_proposed_anew_and_needs_a_decision_of_its_own(
    client: httpx.Client, dsn: str
) -> None:
    body = {"case_id": asyncio.run(copy_case(dsn)), "stage": "act"}
    rejected_run = created(client, body)
    wait_for(client, rejected_run, waiting)
    rejected = operations(client, rejected_run)[SEND]
    assert decide(client, rejected_run, rejected, "reject", APPROVER_KEY).status_code == 200
    assert wait_for(client, rejected_run, finished)["stop_reason"] == "OPERATION_REJECTED"

    expiring_run = created(client, {**body, "budgets": {"approval_wait_s": 2}})
    wait_for(client, expiring_run, waiting)
    expiring = operations(client, expiring_run)[SEND]
    assert expiring["operation_id"] != rejected["operation_id"]  # proposed anew, and asked again
    assert expiring["state"] == "awaiting_approval"
    assert wait_for(client, expiring_run, finished)["stop_reason"] == "APPROVAL_EXPIRED"

    last_run = created(client, body)
    wait_for(client, last_run, waiting)
    last = operations(client, last_run)[SEND]
    assert last["operation_id"] not in {rejected["operation_id"], expiring["operation_id"]}
    assert (last["state"], last["shared"]) == ("awaiting_approval", False)
    # A no given to the first operation is no decision on this one, through either run.
    assert problem(decide(client, rejected_run, last, "approve", APPROVER_KEY)) == (
        404,
        "operation-not-found",
    )
    assert decide(client, last_run, last, "approve", APPROVER_KEY).status_code == 200
    assert wait_for(client, last_run, finished)["status"] == "completed"
    assert effects(dsn, body["case_id"]) == (1, 1)


def test_no_requester_of_a_run_sharing_an_operation_decides_it_and_a_stopped_run_leaves_it_to_the_others(
    client: httpx.Client, dsn: str
) -> None:
    """Separation of duties holds for every run that shares the intent: the person who asked for the second run
    may not approve it through the first; and the first run, cancelled, does not expire what the second still
    waits on."""
    body = {"case_id": asyncio.run(copy_case(dsn)), "stage": "act"}
    first = created(client, body)  # asked for by the dev key's subject
    wait_for(client, first, waiting)
    second = created(client, body, key=APPROVER_KEY)  # asked for by "approver"
    reached(client, second, APPROVER_KEY, waiting)
    send = operations(client, first)[SEND]
    assert operations(client, second, APPROVER_KEY)[SEND]["operation_id"] == send["operation_id"]

    # "approver" asked for the second run: the first run's send is its request too.
    assert problem(decide(client, first, send, "approve", APPROVER_KEY)) == (403, "operation-self-approval")
    assert problem(decide(client, first, send, "reject", APPROVER_KEY)) == (403, "operation-self-approval")

    assert client.post(f"/runs/{first}/cancel", headers=auth(DEMO_KEY)).json()["status"] == "cancelled"
    assert operations(client, second, APPROVER_KEY)[SEND]["state"] == "awaiting_approval"
    joined = reached(client, second, APPROVER_KEY, waiting)
    assert joined["status"] == "waiting"
    assert [item["operation_id"] for item in joined["waiting_for"]] == [send["operation_id"]]
    # The run that proposed it has ended, the one that joined it waits: the inbox still shows it.
    inbox = client.get("/decisions", params={"kind": "operation"}, headers=auth(APPROVER_KEY)).json()["items"]
    assert send["operation_id"] in [item["operation_id"] for item in inbox], inbox
    assert client.post(f"/runs/{second}/cancel", headers=auth(APPROVER_KEY)).json()["status"] == "cancelled"
    assert operations(client, second, APPROVER_KEY)[SEND]["state"] == "expired"  # nobody waits on it now
    assert effects(dsn, body["case_id"]) == (1, 0)


def test_runs_started_at_once_on_two_supervisors_converge_on_one_operation(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    """Two APIs over one database, each with a supervisor of its own that creates and drives the runs submitted
    to it: three runs submitted to each at the same moment propose the same draft and the same send at once.
    PostgreSQL keeps one row of each, which all six runs share."""
    tools: RunningToolServer = start_tool_server()
    bases = [serve_api(api_config(scratch_dsn, tools.url, token_key)) for _ in range(2)]
    case = asyncio.run(copy_case(dsn, scratch_dsn))
    body = {"case_id": case, "stage": "act"}

    def submit(index: int) -> str:
        with httpx.Client(base_url=bases[index % 2], timeout=60) as client:
            return created(client, body)

    with ThreadPoolExecutor(6) as pool:
        runs = list(pool.map(submit, range(6)))
    with httpx.Client(base_url=bases[0], timeout=60) as client:
        for run_id in runs:
            wait_for(client, run_id, waiting)
        listed = [operations(client, run_id) for run_id in runs]
        rows = asyncio.run(_rows(scratch_dsn, case))
        send = listed[0][SEND]
        assert decide(client, runs[-1], send, "approve", APPROVER_KEY).status_code == 200
        ended = [wait_for(client, run_id, finished) for run_id in runs]

    assert rows == {DRAFT: (1, 6), SEND: (1, 6)}  # (operations, runs sharing them) per tool
    assert {ops[SEND]["operation_id"] for ops in listed} == {send["operation_id"]}
    assert [run["status"] for run in ended] == ["completed"] * 6, ended
    assert effects(dsn, case) == (1, 1)
    assert calls(tools) == (1, 1)


async def _rows(dsn: str, case_id: str) -> dict[str, tuple[int, int]]:
    """Per tool, how many operations the ledger holds for the case and how many runs share them."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            """SELECT o.tool, count(DISTINCT o.operation_id) AS operations, count(r.run_id) AS runs
               FROM operations o JOIN operation_runs r USING (operation_id)
               WHERE o.args->>'case_id' = $1 GROUP BY o.tool""",
            case_id,
        )
        return {row["tool"]: (row["operations"], row["runs"]) for row in rows}
    finally:
        await connection.close()


def toolsets_with_a_daily_send(mcp_url: str) -> Any:
    """The shipped caseops toolsets, with the send's intent narrowed to its case, for a day."""
    text = (REPO / "mcp_server" / "caseops.yaml").read_text(encoding="utf-8")
    marker = "          idempotency_key: idempotency_key\n          reconcile:\n"
    assert marker in text
    intent = "          intent: {arguments: [case_id], window_s: 86400}\n"
    text = text.replace(marker, intent + marker, 1)
    return parse_toolsets(text, "caseops-daily-send.yaml", {"RAYDAG_MCP_URL": mcp_url})


def test_an_intent_narrowed_to_its_case_is_one_send_whatever_the_draft_until_its_window_passes(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    tools: RunningToolServer = start_tool_server()
    config = api_config(scratch_dsn, tools.url, token_key, toolsets=toolsets_with_a_daily_send(tools.url))
    base = serve_api(config)
    case = asyncio.run(copy_case(dsn, scratch_dsn))

    def plan(*codes: str) -> dict[str, Any]:
        draft = {
            "id": "draft",
            "tool": DRAFT,
            "args": {"case_id": case, "missing_document_codes": list(codes)},
        }
        send = {
            "id": "send",
            "tool": SEND,
            "args": {"case_id": case, "draft_id": {"$ref": "draft", "pointer": "/draft_id"}},
        }
        return {"case_id": case, "stage": "act", "plan": {"nodes": [draft, send]}}

    with httpx.Client(base_url=base, timeout=60) as client:
        first = created(client, plan("ACCIDENT_CERTIFICATE"))
        wait_for(client, first, waiting)
        send = operations(client, first)[SEND]
        assert decide(client, first, send, "approve", APPROVER_KEY).status_code == 200
        assert wait_for(client, first, finished)["status"] == "completed"

        # Another draft, so other arguments: the same intent within the day, read without a call.
        second = created(client, plan("ACCIDENT_CERTIFICATE", "POLICE_REPORT"))
        joined = wait_for(client, second, finished)
        read = operations(client, second)
        assert read[DRAFT]["operation_id"] != operations(client, first)[DRAFT]["operation_id"]
        assert (read[SEND]["operation_id"], read[SEND]["shared"]) == (send["operation_id"], True)
        assert effects(dsn, case) == (2, 1)

        asyncio.run(_a_day_ago(scratch_dsn, send["operation_id"]))  # as if the day had passed
        third = created(client, plan("ACCIDENT_CERTIFICATE", "POLICE_REPORT"))
        wait_for(client, third, waiting)
        reminder = operations(client, third)[SEND]
        assert decide(client, third, reminder, "approve", APPROVER_KEY).status_code == 200
        reminded = wait_for(client, third, finished)

    assert joined["status"] == "completed", joined
    assert reminder["operation_id"] != send["operation_id"]  # a new operation, that asked for a yes
    assert (reminder["state"], reminder["shared"]) == ("awaiting_approval", False)
    assert reminded["status"] == "completed", reminded
    assert effects(dsn, case) == (2, 2)  # the reminder went out a day later
    assert calls(tools) == (2, 2)


async def _a_day_ago(dsn: str, operation_id: str) -> None:
    """Move the operation's last change a day back, with the clock of the database that compares it."""
    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "UPDATE operations SET updated_at = now() - interval '1 day' WHERE operation_id = $1",
            uuid.UUID(operation_id),
        )
    finally:
        await connection.close()

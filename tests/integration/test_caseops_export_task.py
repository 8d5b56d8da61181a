"""caseops' evidence export runs as an MCP task, in both forms: over the wire in the 2025-11-25 form (its
listing, capability, stages, result, cancel, another tenant's token) and in the 2026-07-28 form (the
``io.modelcontextprotocol/tasks`` extension: advertised, declared per request, result inlined, cancel); and in a
run beside fast reads (the shipped toolsets pin caseops to 2026-07-28), its progress in the run's log, a
cancelled run stopping the export at the server, a supervisor killed mid-task following the same task, one that
lost the run's lease leaving the task to the run's new owner; an export that must be confirmed asking in the
extension's form (and refused where nobody can be asked). Counted in the server's own tables, never in
raydag's records."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES, EXPORT_EVIDENCE
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_durability import finished, until

EXPORT = EXPORT_EVIDENCE.name
PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
EXTENSION = "io.modelcontextprotocol/tasks"


def modern(params: dict[str, Any], *, declared: bool = True) -> dict[str, Any]:
    """``params`` with the 2026-07-28 ``_meta`` envelope, the Tasks extension declared or not."""
    capabilities = {"extensions": {EXTENSION: {}}} if declared else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    return {**params, "_meta": meta}


async def rpc(
    server: RunningToolServer,
    token: str,
    method: str,
    params: dict[str, Any],
    *,
    era: str = "2025-11-25",
    status: int = 200,
) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {**HEADERS, "Authorization": f"Bearer {token}", "MCP-Protocol-Version": era}
    if era == "2026-07-28":
        headers["Mcp-Method"] = method
        name = params.get("name", params.get("taskId"))
        if name is not None:
            headers["Mcp-Name"] = name
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(server.url, json=body, headers=headers)
    assert answer.status_code == status, answer.text
    return dict(answer.json())


async def task_row(dsn: str, task_id: str) -> asyncpg.Record:
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow("SELECT * FROM caseops_tasks WHERE task_id = $1", task_id)
        assert row is not None
        return row
    finally:
        await connection.close()


async def exports_of(dsn: str, export_id: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        return int(
            await connection.fetchval("SELECT count(*) FROM evidence_exports WHERE export_id = $1", export_id)
        )
    finally:
        await connection.close()


async def stopped(dsn: str, task_id: str) -> asyncpg.Record:
    """The task's row once its work has stopped (the worker records it on its way out)."""
    for _ in range(600):
        row = await task_row(dsn, task_id)
        if row["stopped_at"] is not None:
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"the work of {task_id} never stopped")


async def test_the_export_is_listed_and_served_as_a_task_with_stages_and_its_result(
    tool_server: RunningToolServer, dsn: str
) -> None:
    start = await rpc(
        tool_server,
        tool_server.token("caseops_get_case_snapshot"),
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    )
    assert start["result"]["capabilities"]["tasks"]["requests"] == {"tools": {"call": {}}}
    listed = await rpc(tool_server, tool_server.token(EXPORT), "tools/list", {})
    [export] = [tool for tool in listed["result"]["tools"] if tool["name"] == EXPORT]
    assert export["execution"] == {"taskSupport": "optional"}

    token = tool_server.token(EXPORT)
    created = await rpc(
        tool_server,
        token,
        "tools/call",
        {"name": EXPORT, "arguments": {"case_id": "C-102"}, "task": {"ttl": 60000}},
    )
    task = created["result"]["task"]
    assert (task["status"], task["ttl"]) == ("working", 60000)
    messages = set()
    while True:
        got = (await rpc(tool_server, token, "tasks/get", {"taskId": task["taskId"]}))["result"]
        messages.add(got.get("statusMessage"))
        if got["status"] != "working":
            break
        await asyncio.sleep(got["pollInterval"] / 1000)
    assert got["status"] == "completed"
    assert {"reading the case snapshot", "sealing the bundle"} & messages
    result = (await rpc(tool_server, token, "tasks/result", {"taskId": task["taskId"]}))["result"]
    bundle = result["structuredContent"]
    assert result["isError"] is False
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task["taskId"]}
    assert (bundle["case_id"], bundle["export_id"]) == ("C-102", task["taskId"])
    assert "evidence://C-102/DOC-C102-003@1" in bundle["evidence_refs"]
    assert await exports_of(dsn, task["taskId"]) == 1
    # Another tenant's token (or another case's) is told the task does not exist.
    other = tool_server.token(EXPORT, tenant="tenant-other", case="C-201")
    refused = await rpc(tool_server, other, "tasks/get", {"taskId": task["taskId"]})
    assert refused["error"]["code"] == -32602


async def test_a_cancelled_export_stops_and_writes_no_bundle(
    tool_server: RunningToolServer, dsn: str
) -> None:
    token = tool_server.token(EXPORT, case="C-104")  # 24 documents: many stages
    created = await rpc(
        tool_server, token, "tools/call", {"name": EXPORT, "arguments": {"case_id": "C-104"}, "task": {}}
    )
    task_id = created["result"]["task"]["taskId"]
    cancelled = await rpc(tool_server, token, "tasks/cancel", {"taskId": task_id})
    assert cancelled["result"]["status"] == "cancelled"
    row = await stopped(dsn, task_id)
    assert (row["status"], row["result"]) == ("cancelled", None)
    assert row["stages_done"] < 24
    assert await exports_of(dsn, task_id) == 0
    again = await rpc(tool_server, token, "tasks/cancel", {"taskId": task_id})
    assert again["result"]["status"] == "cancelled"
    result = await rpc(tool_server, token, "tasks/result", {"taskId": task_id})
    assert result["error"]["code"] == -32602


async def test_the_export_is_served_under_the_tasks_extension_in_the_2026_07_28_era(
    tool_server: RunningToolServer, dsn: str
) -> None:
    era = "2026-07-28"
    discovered = await rpc(
        tool_server, tool_server.token("caseops_get_case_snapshot"), "server/discover", modern({}), era=era
    )
    assert discovered["result"]["capabilities"]["extensions"][EXTENSION] == {}
    assert "tasks" not in discovered["result"]["capabilities"]

    token = tool_server.token(EXPORT)
    call = {"name": EXPORT, "arguments": {"case_id": "C-102"}}
    created = (await rpc(tool_server, token, "tools/call", modern(call), era=era))["result"]
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert {"ttlMs", "pollIntervalMs"} <= created.keys()
    assert "ttl" not in created
    while True:
        got = await rpc(tool_server, token, "tasks/get", modern({"taskId": created["taskId"]}), era=era)
        task = got["result"]
        if task["status"] != "working":
            break
        assert "result" not in task
        await asyncio.sleep(task["pollIntervalMs"] / 1000)
    assert (task["resultType"], task["status"]) == ("complete", "completed")
    assert task["result"]["isError"] is False
    assert task["result"]["structuredContent"]["export_id"] == created["taskId"]
    assert await exports_of(dsn, created["taskId"]) == 1
    gone = await rpc(
        tool_server, token, "tasks/result", modern({"taskId": created["taskId"]}), era=era, status=404
    )
    assert gone["error"]["code"] == -32601  # not a method of the extension

    # A client that does not declare the extension is answered at once, with the bundle itself.
    plain = await rpc(
        tool_server, tool_server.token(EXPORT), "tools/call", modern(call, declared=False), era=era
    )
    assert plain["result"]["structuredContent"]["case_id"] == "C-102"
    assert plain["result"].get("resultType", "complete") == "complete"


async def test_a_cancel_under_the_tasks_extension_stops_the_export(
    tool_server: RunningToolServer, dsn: str
) -> None:
    era = "2026-07-28"
    token = tool_server.token(EXPORT, case="C-104")
    call = {"name": EXPORT, "arguments": {"case_id": "C-104"}}
    task_id = (await rpc(tool_server, token, "tools/call", modern(call), era=era))["result"]["taskId"]
    acknowledged = await rpc(tool_server, token, "tasks/cancel", modern({"taskId": task_id}), era=era)
    assert acknowledged["result"] == {"resultType": "complete"}
    row = await stopped(dsn, task_id)
    assert (row["status"], row["result"]) == ("cancelled", None)
    assert await exports_of(dsn, task_id) == 0
    got = await rpc(tool_server, token, "tasks/get", modern({"taskId": task_id}), era=era)
    assert got["result"]["status"] == "cancelled"
    unknown = await rpc(tool_server, token, "tasks/get", modern({"taskId": "task-0"}), era=era)
    assert unknown["error"]["code"] == -32602


def export_plan(case_id: str) -> dict[str, Any]:
    return {
        "nodes": [
            {"id": "export", "tool": EXPORT, "args": {"case_id": case_id}},
            {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": case_id}},
            {"id": "policy", "tool": "caseops_get_policy_requirements", "args": {"case_id": case_id}},
        ]
    }


async def submitted(supervisor: Any, case_id: str) -> str:
    answer = await supervisor.submit.remote(
        RunRequest(
            principal=PRINCIPAL, resource={"case_id": case_id}, plan=export_plan(case_id), planner="outputs"
        )
    )
    assert answer.outcome is Submission.CREATED, answer
    return str(answer.run_id)


def task_updates(events: list[Any]) -> list[dict[str, Any]]:
    return [event.task for event in events if event.kind == "node_task_updated"]


@pytest.fixture
def name() -> str:
    return f"raydag-test-export-{uuid.uuid4().hex[:6]}"


async def test_a_run_follows_the_export_task_beside_fast_reads_and_records_its_stages(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, name)
    try:
        offered = await supervisor.contracts.remote()
        run_id = await submitted(supervisor, "C-102")
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)

    assert offered[EXPORT].task is True
    assert offered["caseops_get_case_snapshot"].task is False
    assert events[-1].status == "completed", events[-1]
    [exported] = [event for event in events if event.kind == "node_succeeded" and event.node_id == "export"]
    bundle = exported.output
    assert bundle["case_id"] == "C-102"
    updates = task_updates(events)
    assert {update["task_id"] for update in updates} == {bundle["export_id"]}
    assert {update["protocol"] for update in updates} == {"2026-07-28"}  # the extension's form
    assert len({update["message"] for update in updates}) >= 2  # its stages, as the server reported them
    assert await exports_of(dsn, bundle["export_id"]) == 1


async def test_a_cancelled_run_stops_the_export_at_the_server(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, name)
    try:
        run_id = await submitted(supervisor, "C-104")
        events = await until(store, run_id, lambda events: len(task_updates(events)) >= 1)
        task_id = task_updates(events)[0]["task_id"]
        await supervisor.cancel.remote(run_id)
        events = await until(store, run_id, finished)
        row = await stopped(dsn, task_id)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "cancelled", events[-1]
    assert (row["status"], row["result"]) == ("cancelled", None)
    assert row["stages_done"] < 24
    assert await exports_of(dsn, task_id) == 0
    assert json.dumps(row["status_message"]) == json.dumps("cancelled by the client")


async def tasks_since(dsn: str, case_id: str, since: Any) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        return int(
            await connection.fetchval(
                "SELECT count(*) FROM caseops_tasks WHERE case_id = $1 AND created_at >= $2", case_id, since
            )
        )
    finally:
        await connection.close()


async def test_a_supervisor_killed_mid_export_follows_the_same_task_without_a_second_call(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    import ray

    connection = await asyncpg.connect(dsn)
    try:
        since = await connection.fetchval("SELECT now()")
    finally:
        await connection.close()
    supervisor = supervisor_for(dsn, tool_server, token_key, name)
    try:
        run_id = await submitted(supervisor, "C-104")
        await until(store, run_id, lambda events: len(task_updates(events)) >= 1)
        ray.kill(supervisor, no_restart=False)  # Ray restarts it; it reclaims and resumes the run
        events = await until(store, run_id, finished, timeout_s=120)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    assert [event.kind for event in events].count("run_recovered") == 1
    updates = task_updates(events)
    assert len({update["task_id"] for update in updates}) == 1
    assert await tasks_since(dsn, "C-104", since) == 1  # the export was started once, counted at the server
    assert await exports_of(dsn, updates[0]["task_id"]) == 1


async def test_a_supervisor_that_loses_the_lease_mid_export_leaves_the_task_to_the_runs_new_owner(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    """A supervisor whose lease another took (its renewals late: a pause, a partition) stops driving the run,
    and must not stop its task: the run's new owner follows that same task to its end. Only the run's own stop
    cancels a task. The server's own row says whether it was cancelled, and how many exports were started."""
    import ray

    connection = await asyncpg.connect(dsn)
    try:
        since = await connection.fetchval("SELECT now()")
    finally:
        await connection.close()
    first = supervisor_for(dsn, tool_server, token_key, name, lease_s=3.0)
    second = supervisor_for(dsn, tool_server, token_key, f"{name}-next", lease_s=3.0)
    try:
        await second.contracts.remote()
        run_id = await submitted(first, "C-104")
        events = await until(store, run_id, lambda events: len(task_updates(events)) >= 1)
        task_id = task_updates(events)[0]["task_id"]
        connection = await asyncpg.connect(dsn)
        try:  # the lease is the second's now, as a takeover of a lapsed lease leaves it
            await connection.execute(
                "UPDATE runs SET owner = $1 WHERE run_id = $2", f"{name}-next", uuid.UUID(run_id)
            )
        finally:
            await connection.close()
        events = await until(store, run_id, finished, timeout_s=120)
        row = await stopped(dsn, task_id)
    finally:
        ray.kill(first)
        ray.kill(second)

    assert events[-1].status == "completed", events[-1]
    [recovered] = [event for event in events if event.kind == "run_recovered"]
    assert recovered.owner == f"{name}-next"
    assert {update["task_id"] for update in task_updates(events)} == {task_id}
    assert (row["status"], row["status_message"]) == ("completed", "completed")  # never cancelled
    assert await tasks_since(dsn, "C-104", since) == 1  # the export was started once, counted at the server
    assert await exports_of(dsn, task_id) == 1


async def asked_task(server: RunningToolServer, token: str, task_id: str) -> dict[str, Any]:
    """The extension's task once it asks (``input_required``), as ``tasks/get`` shows it."""
    for _ in range(600):
        task = (await rpc(server, token, "tasks/get", modern({"taskId": task_id}), era="2026-07-28"))[
            "result"
        ]
        if task["status"] != "working":
            return dict(task)
        await asyncio.sleep(task["pollIntervalMs"] / 1000)
    raise AssertionError(f"task {task_id} never asked")


@pytest.mark.parametrize("confirmed", [True, False], ids=["sealed", "declined"])
async def test_an_export_that_must_be_confirmed_asks_under_the_extension_and_seals_only_on_a_yes(
    tool_server: RunningToolServer, dsn: str, confirmed: bool
) -> None:
    era = "2026-07-28"
    token = tool_server.token(EXPORT)
    call = {"name": EXPORT, "arguments": {"case_id": "C-102", "confirm": True}}
    task_id = (await rpc(tool_server, token, "tools/call", modern(call), era=era))["result"]["taskId"]
    task = await asked_task(tool_server, token, task_id)
    assert task["status"] == "input_required"
    [(key, request)] = task["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "form"
    assert "C-102" in request["params"]["message"]
    assert request["params"]["requestedSchema"]["required"] == ["seal"]
    assert await exports_of(dsn, task_id) == 0  # nothing sealed while it asks

    unknown = {
        "taskId": task_id,
        "inputResponses": {"other": {"action": "accept", "content": {"seal": True}}},
    }
    assert (await rpc(tool_server, token, "tasks/update", modern(unknown), era=era))["result"] == {
        "resultType": "complete"
    }
    still = (await rpc(tool_server, token, "tasks/get", modern({"taskId": task_id}), era=era))["result"]
    assert still["status"] == "input_required"  # an answer to a key it did not ask is ignored
    reply = {"action": "accept", "content": {"seal": True}} if confirmed else {"action": "decline"}
    update = {"taskId": task_id, "inputResponses": {key: reply}}
    assert (await rpc(tool_server, token, "tasks/update", modern(update), era=era))["result"] == {
        "resultType": "complete"
    }
    row = await stopped(dsn, task_id)
    ended = (await rpc(tool_server, token, "tasks/get", modern({"taskId": task_id}), era=era))["result"]

    assert ended["status"] == "completed"
    assert ended["result"]["isError"] is not confirmed
    if confirmed:
        assert ended["result"]["structuredContent"]["export_id"] == task_id
    else:
        assert ended["result"]["structuredContent"]["error"]["code"] == "EXPORT_NOT_CONFIRMED"
    assert await exports_of(dsn, task_id) == int(confirmed)
    assert json.loads(row["input_responses"]) == {key: reply}  # the server's own record of the answer


async def test_an_export_that_must_be_confirmed_is_refused_where_nobody_can_be_asked(
    tool_server: RunningToolServer, dsn: str
) -> None:
    """The 2025-11-25 form delivers a server's request on a session's stream, which caseops has none of; a plain
    call has no task to ask in: refused at once, nothing sealed unasked."""
    token = tool_server.token(EXPORT)
    arguments = {"case_id": "C-102", "confirm": True}
    created = await rpc(
        tool_server, token, "tools/call", {"name": EXPORT, "arguments": arguments, "task": {"ttl": 60000}}
    )
    task_id = created["result"]["task"]["taskId"]
    row = await stopped(dsn, task_id)
    plain = await rpc(
        tool_server,
        tool_server.token(EXPORT),
        "tools/call",
        modern({"name": EXPORT, "arguments": arguments}, declared=False),
        era="2026-07-28",
    )

    assert (row["status"], row["is_error"]) == ("failed", True)
    assert json.loads(row["result"])["error"]["code"] == "CONFIRMATION_UNAVAILABLE"
    assert row["stages_done"] == 0
    assert plain["result"]["isError"] is True
    assert plain["result"]["structuredContent"]["error"]["code"] == "CONFIRMATION_UNAVAILABLE"
    assert await exports_of(dsn, task_id) == 0


def negotiating_toolsets(url: str) -> Any:
    """The shipped caseops toolset with ``protocol: auto`` instead of its pin to 2026-07-28."""
    from pathlib import Path

    import mcp_server
    from actors.toolsets import parse_toolsets

    text = (Path(mcp_server.__file__).parent / "caseops.yaml").read_text()
    assert "protocol: 2026-07-28" in text
    return parse_toolsets(
        text.replace("protocol: 2026-07-28", "protocol: auto"), "caseops-auto.yaml", {"RAYDAG_MCP_URL": url}
    )


async def test_a_server_of_the_auto_era_that_offers_the_extension_runs_its_task_in_the_2026_07_28_form(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    """``auto`` negotiates: caseops advertises the Tasks extension in ``server/discover``, so its export is
    started and followed in the extension's form (server-everything, which refuses ``server/discover``, keeps
    the 2025-11-25 form: ``test_mcp_tasks.py``). The server's table holds one task, completed."""
    import ray

    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=negotiating_toolsets(tool_server.url)
    )
    try:
        run_id = await submitted(supervisor, "C-102")
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    updates = task_updates(events)
    assert {update["protocol"] for update in updates} == {"2026-07-28"}
    [task_id] = {update["task_id"] for update in updates}
    row = await stopped(dsn, task_id)
    assert row["status"] == "completed"
    assert await exports_of(dsn, task_id) == 1

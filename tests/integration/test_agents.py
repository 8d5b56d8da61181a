"""Agent nodes with the real things: a local Ray supervisor, PostgreSQL and the caseops MCP server over HTTP. Each
child run is a run of its own, linked to its parent both ways; effects are counted where they happen (the tool
server's answers), the links and spend where raydag keeps them (the runs' rows and events)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from actors.api.views import load_state, node_view
from actors.run.submission import Cancellation, ContinueRequest, RunRequest, Submission
from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS, SCOPE_CASES, SCOPE_POLICIES
from tests.caseops import copy_case
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, RunningToolServer, auth, supervisor_for
from tests.integration.test_operations import SEND, draft_then_send, requests_in_outbox
from tests.planners import INJECTION

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
NO_DOCUMENTS = Principal("tenant-demo", "limited", frozenset({SCOPE_CASES, SCOPE_POLICIES}))
CASE = "caseops_get_case_snapshot"
POLICY = "caseops_get_policy_requirements"
DOCUMENTS = "caseops_list_unclassified_documents"
RESOLVE = "caseops_resolve_document_alias"
CASE_ID = "C-102"
LATENCY_MS = 600


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def read(node_id: str, tool: str, **fields: Any) -> dict[str, Any]:
    return {"id": node_id, "tool": tool, "args": {"case_id": CASE_ID}, **fields}


def agent(node_id: str, goal: str, *nodes: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body = {"goal": goal, "plan": {"nodes": list(nodes)}, **fields.pop("body", {})}
    return {"id": node_id, "agent": body, **fields}


async def until(store: RunStore, run_id: str, predicate: Any, timeout_s: float = 60) -> list[Any]:
    """Poll the run's events until ``predicate(events)`` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = [stored.event for stored in await store.events(run_id)]
        if events and predicate(events):
            return events
        assert time.monotonic() < deadline, (
            f"condition not reached; last event {events[-1].kind if events else None}"
        )
        await asyncio.sleep(0.05)


def finished(events: list[Any]) -> bool:
    return events[-1].kind == "run_finished"


def of_kind(events: list[Any], kind: str) -> list[Any]:
    return [event for event in events if event.kind == kind]


async def row(store: RunStore, run_id: str, principal: Principal = PRINCIPAL) -> dict[str, Any]:
    found = await store.run_row(principal, run_id)
    assert found is not None
    return found


async def submitted_run(
    supervisor: Any, plan: dict[str, Any], principal: Principal = PRINCIPAL, **request: Any
) -> str:
    """Submit a run of ``plan`` (over case C-102 unless ``request`` names a resource) and return its id."""
    asked = {"principal": principal, "resource": {"case_id": CASE_ID}, "plan": plan, **request}
    submitted = await supervisor.submit.remote(RunRequest(**asked))
    assert submitted.outcome is Submission.CREATED, submitted
    return str(submitted.run_id)


async def first_child(store: RunStore, run_id: str) -> str:
    """The child run the parent's first agent node started, once it names it."""
    events = await until(store, run_id, lambda events: of_kind(events, "agent_started"))
    return str(of_kind(events, "agent_started")[0].child_run_id)


def answered(tool_server: RunningToolServer, run_id: str) -> dict[str, int]:
    """The calls the tool server answered for ``run_id``, by node: counted where the effect happens."""
    prefix = f"{run_id}/"
    return {
        task.removeprefix(prefix): count
        for task, count in tool_server.server.answered.items()
        if task.startswith(prefix)
    }


@pytest.fixture
def slow(start_tool_server: Any) -> RunningToolServer:
    server: RunningToolServer = start_tool_server(latency_ms=LATENCY_MS)
    return server


@pytest.fixture
def supervisor(ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes) -> Any:
    import ray

    actor = supervisor_for(
        dsn, tool_server, token_key, unique("agents"), planners=("tests.planners:InjectingPlanner",)
    )
    yield actor
    ray.kill(actor)


async def test_two_sibling_child_dag_nodes_complete_each_with_its_childs_result(
    supervisor: Any, tool_server: RunningToolServer, store: RunStore
) -> None:
    plan = {
        "nodes": [
            read("case", CASE),
            agent("policy_agent", "read the policy", read("policy", POLICY), args={"case": {"$ref": "case"}}),
            agent(
                "docs_agent", "list the documents", read("docs", DOCUMENTS), args={"case": {"$ref": "case"}}
            ),
        ]
    }
    run_id = await submitted_run(supervisor, plan)
    events = await until(store, run_id, finished)

    parent = await row(store, run_id)
    assert parent["status"] == "completed", parent["detail"]
    started = {event.node_id: event.child_run_id for event in of_kind(events, "agent_started")}
    assert set(started) == {"policy_agent", "docs_agent"}
    # Both children, ready together once `case` succeeded, started before either ended: side by side. (Had
    # one not waited on `case`, it could have ended before the other was ready, on a loaded machine.)
    kinds = [event.kind for event in events]
    assert kinds.index("agent_ended") > max(i for i, kind in enumerate(kinds) if kind == "agent_started")
    assert sorted(str(child) for child in parent["children"]) == sorted(started.values())
    outputs = parent["result"]["outputs"]
    for node_id, inner in (("policy_agent", "policy"), ("docs_agent", "docs")):
        child_id = started[node_id]
        child = await row(store, child_id)
        assert (child["status"], str(child["parent_run_id"]), child["parent_node_id"], child["depth"]) == (
            "completed",
            run_id,
            node_id,
            1,
        )
        assert outputs[node_id] == {"run_id": child_id, "result": child["result"], "truncated": False}
        assert set(child["result"]["outputs"]) == {inner}
        assert answered(tool_server, child_id) == {inner: 1}
    created = (await store.events(started["policy_agent"]))[0].event
    assert created.parent.inputs == {"case": outputs["case"]}
    assert (created.tenant_id, created.subject, created.resource) == (
        "tenant-demo",
        "test",
        {"case_id": CASE_ID},
    )
    assert answered(tool_server, run_id) == {"case": 1}  # the parent called only its own node


async def test_parents_that_hold_every_turn_still_see_their_children_driven(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    # One turn, two parents: a child that waited for a turn its waiting parent holds would never run.
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, unique("agents-one-turn"), max_active_runs=1)
    try:
        plan = {"nodes": [agent("docs_agent", "list the documents", read("docs", DOCUMENTS))]}
        parents = [await submitted_run(supervisor, plan) for _ in range(2)]
        for run_id in parents:
            await until(store, run_id, finished)
    finally:
        ray.kill(supervisor)

    for run_id in parents:
        parent = await row(store, run_id)
        assert parent["status"] == "completed", parent["detail"]
        [child_id] = [str(child) for child in parent["children"]]
        assert answered(tool_server, child_id) == {"docs": 1}


async def test_a_childs_tool_outside_the_parents_is_refused_and_fails_its_node(
    supervisor: Any, store: RunStore
) -> None:
    body = {"tools": [DOCUMENTS]}
    run_id = await submitted_run(
        supervisor,
        {"nodes": [agent("research", "read documents", read("docs", DOCUMENTS), body=body)]},
        NO_DOCUMENTS,
    )
    await until(store, run_id, finished)

    state = await load_state(store, run_id)
    node = state.nodes["research"]
    assert node.error is not None
    assert (node.status.value, node.error.code) == ("failed", "AGENT_TOOL_NOT_OFFERED")
    assert DOCUMENTS in node.error.message
    assert node.child_run_id is None
    assert (await row(store, run_id, NO_DOCUMENTS))["children"] == []


async def test_agents_nested_beyond_the_depth_limit_are_refused_at_submission(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> None:
    import ray

    shallow = supervisor_for(dsn, tool_server, token_key, unique("shallow"), agent_depth=1)
    try:
        nested = agent("outer", "delegate", agent("inner", "read", read("case", CASE)))
        submitted = await shallow.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": CASE_ID}, plan={"nodes": [nested]})
        )
        one_level = await submitted_run(shallow, {"nodes": [agent("outer", "read", read("case", CASE))]})
    finally:
        ray.kill(shallow)
    assert submitted.outcome is Submission.PLAN_INVALID
    assert submitted.error is not None
    assert (submitted.error["code"], submitted.error["location"]) == (
        "AGENT_TOO_DEEP",
        "/nodes/0/agent/plan/nodes/0/agent",
    )
    assert one_level


async def test_a_childs_budget_is_carved_from_what_its_parent_has_left_and_spent_by_the_parent(
    supervisor: Any, store: RunStore
) -> None:
    research = agent(
        "research",
        "read twice",
        read("policy", POLICY),
        read("docs", DOCUMENTS),
        body={"budgets": {"max_nodes": 50, "deadline_s": 500}},
        after=["case"],
    )
    budgets = BudgetRequest(max_nodes=6, deadline_s=60)
    run_id = await submitted_run(supervisor, {"nodes": [read("case", CASE), research]}, budgets=budgets)
    events = await until(store, run_id, finished)
    assert (await row(store, run_id))["status"] == "completed"

    (started,) = of_kind(events, "agent_started")
    child = (await store.events(started.child_run_id))[0].event
    assert child.budgets.max_nodes == 4  # 6, less the parent's two nodes
    assert 0 < child.budgets.deadline_s < 60
    parent = await load_state(store, run_id)
    assert parent.child_nodes == 2
    assert parent.node_count() == 4  # its own two and its child's two count against its max_nodes


async def cancelled_with_its_child(supervisor: Any, store: RunStore, run_id: str, child_id: str) -> None:
    """Cancel the parent run and see it, and its child, end cancelled."""
    assert await supervisor.cancel.remote(run_id) is Cancellation.CANCELLED
    child_events = await until(store, child_id, finished)
    assert (child_events[-1].status.value, child_events[-1].stop_reason.value) == ("cancelled", "CANCELLED")
    assert (await row(store, run_id))["status"] == "cancelled"


async def test_cancelling_the_parent_cancels_its_child(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("agents-cancel"))
    try:
        inner = [read("case", CASE), read("policy", POLICY, after=["case"])]
        run_id = await submitted_run(supervisor, {"nodes": [agent("research", "read slowly", *inner)]})
        child_id = await first_child(store, run_id)
        await until(store, child_id, lambda events: of_kind(events, "node_dispatched"))

        await cancelled_with_its_child(supervisor, store, run_id, child_id)
    finally:
        ray.kill(supervisor)
    assert "policy" not in answered(slow, child_id)  # nothing dispatched after the cancel


async def test_a_parent_out_of_budget_stops_its_child_with_the_budgets_stop_reason(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("agents-budget-stop"))
    try:
        inner = [read("case", CASE), read("policy", POLICY, after=["case"])]
        fanned = {**read("each", DOCUMENTS), "for_each": {"$ref": "policy", "pointer": "/required_documents"}}
        plan = {"nodes": [agent("research", "read slowly", *inner), read("policy", POLICY), fanned]}
        # The policy lists three documents: a fan-out of three is past the parent's max_fanout of two.
        run_id = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_fanout=2))
        parent_events = await until(store, run_id, finished)
        child_id = str(of_kind(parent_events, "agent_started")[0].child_run_id)
        child_events = await until(store, child_id, finished)
    finally:
        ray.kill(supervisor)
    assert (parent_events[-1].status.value, parent_events[-1].stop_reason.value) == (
        "stopped",
        "FANOUT_LIMIT",
    )
    stopped = child_events[-1]
    assert (stopped.status.value, stopped.stop_reason.value) == ("stopped", "FANOUT_LIMIT")
    assert stopped.detail.startswith(f"its parent run {run_id} stopped: ")
    assert not of_kind(child_events, "join_started")  # its planner is asked nothing more


async def test_a_supervisor_killed_mid_child_resumes_with_the_same_child_and_repeats_no_succeeded_call(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("agents-kill"))
    try:
        inner = [
            read("case", CASE),
            read("policy", POLICY, after=["case"]),
            read("docs", DOCUMENTS, after=["policy"]),
        ]
        run_id = await submitted_run(supervisor, {"nodes": [agent("research", "read in turn", *inner)]})
        child_id = await first_child(store, run_id)
        before = await until(store, child_id, lambda events: of_kind(events, "node_succeeded"))
        succeeded_before = {event.node_id for event in of_kind(before, "node_succeeded")}

        ray.kill(supervisor, no_restart=False)  # Ray restarts it; it reclaims the parent and the child

        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)
    parent = await row(store, run_id)
    assert parent["status"] == "completed", parent["detail"]
    assert [event.child_run_id for event in of_kind(events, "agent_started")] == [child_id]
    assert [str(child) for child in parent["children"]] == [child_id]  # no second child
    assert of_kind(events, "run_recovered")
    assert parent["result"]["outputs"]["research"]["run_id"] == child_id
    calls = answered(slow, child_id)
    assert succeeded_before
    for node_id in succeeded_before:
        assert calls[node_id] == 1, calls
    assert set(calls) == {"case", "policy", "docs"}


async def test_a_continued_parent_reuses_the_child_run_that_completed_and_calls_none_of_its_tools_again(
    supervisor: Any, tool_server: RunningToolServer, store: RunStore
) -> None:
    # The parent stops on its node budget after its agent node's child completed: its three nodes and the
    # child's one fit in four, the documents its last node resolves do not.
    resolve = {
        "id": "resolve",
        "tool": RESOLVE,
        "for_each": {"$ref": "docs", "pointer": "/documents"},
        "args": {"case_id": CASE_ID, "document_id": {"$item": "/document_id"}},
    }
    plan = {
        "nodes": [
            agent("research", "read the policy", read("policy", POLICY)),
            read("docs", DOCUMENTS, after=["research"]),
            resolve,
        ]
    }
    first = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_nodes=4))
    await until(store, first, finished)
    stopped = await row(store, first)
    assert (stopped["status"], stopped["stop_reason"]) == ("stopped", "NODE_BUDGET_EXHAUSTED"), stopped[
        "detail"
    ]
    [child_id] = [str(child) for child in stopped["children"]]
    policy_calls = tool_server.server.calls.get(POLICY, 0)

    continued = await supervisor.continue_run.remote(
        ContinueRequest(principal=PRINCIPAL, run_id=first, budgets=BudgetRequest(max_nodes=64))
    )
    assert continued.outcome is Submission.CREATED, continued
    second = str(continued.run_id)
    events = await until(store, second, finished)

    done = await row(store, second)
    assert done["status"] == "completed", done["detail"]
    assert not of_kind(events, "agent_started")  # no child run started again
    assert done["children"] == []
    assert tool_server.server.calls.get(POLICY, 0) == policy_calls  # the child's tool was not called again
    assert answered(tool_server, child_id) == {"policy": 1}
    state = await load_state(store, second)
    research = state.nodes["research"]
    assert (research.status.value, research.reused_from_run) == ("reused", first)
    assert research.output["run_id"] == child_id
    assert node_view(research, CASEOPS_TOOLS).child_run_id == child_id  # the API names the child it reused
    assert research.output["result"] == (await row(store, child_id))["result"]


async def test_a_continued_parent_continues_its_stopped_child_and_reads_nothing_it_read_again(
    supervisor: Any, tool_server: RunningToolServer, store: RunStore
) -> None:
    # The child is carved the three nodes its parent's four leave: its policy read succeeds, then its fan-out
    # over the policy's three documents is past them. The child stops; its parent's node has no output.
    fanned = {**read("each", DOCUMENTS), "for_each": {"$ref": "policy", "pointer": "/required_documents"}}
    plan = {"nodes": [agent("research", "read the policy's documents", read("policy", POLICY), fanned)]}
    first = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_nodes=4))
    await until(store, first, finished)
    needs = await row(store, first)
    assert (needs["status"], needs["stop_reason"]) == ("needs_human", "EVIDENCE_INCOMPLETE"), needs["detail"]
    [stopped_child] = [str(child) for child in needs["children"]]
    await until(store, stopped_child, finished)
    stopped = await row(store, stopped_child)
    assert (stopped["status"], stopped["stop_reason"]) == ("stopped", "NODE_BUDGET_EXHAUSTED")
    assert answered(tool_server, stopped_child) == {"policy": 1}
    policy_calls = tool_server.server.calls.get(POLICY, 0)

    continued = await supervisor.continue_run.remote(
        ContinueRequest(principal=PRINCIPAL, run_id=first, budgets=BudgetRequest(max_nodes=64))
    )
    assert continued.outcome is Submission.CREATED, continued
    second = str(continued.run_id)
    await until(store, second, finished)

    done = await row(store, second)
    assert done["status"] == "completed", done["detail"]
    [child_id] = [str(child) for child in done["children"]]
    child = await row(store, child_id)
    assert child["status"] == "completed", child["detail"]
    assert tool_server.server.calls.get(POLICY, 0) == policy_calls  # its succeeded read was not made again
    assert str(child["continues"]) == stopped_child  # the new child is the stopped child's continuation
    assert str((await row(store, stopped_child))["continued_by"]) == child_id
    calls = answered(tool_server, child_id)
    assert "policy" not in calls
    assert calls  # the documents it had not read are read now
    assert set(calls) <= {"each", "each[0]", "each[1]", "each[2]"}, calls
    state = await load_state(store, child_id)
    assert (state.nodes["policy"].status.value, state.nodes["policy"].reused_from_run) == (
        "reused",
        stopped_child,
    )
    first_event = (await store.events(child_id))[0].event
    assert first_event.budgets.max_nodes == 63  # carved anew from its continued parent's 64, less its node
    assert done["result"]["outputs"]["research"]["run_id"] == child_id


async def test_a_parent_continued_after_its_own_stop_stopped_its_child_continues_that_child(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    import ray

    # Each call takes a second. The parent's own three reads in turn, then a fan-out of three past its
    # max_fanout of two, stop it (at ~3 s) while its child, six reads deep (~6 s), is still reading: the
    # parent's stop stops the child. Its first read landed at ~1 s: seconds of margin either side, on a loaded
    # machine too. The parent is continued at once, before its child has even ended.
    server: RunningToolServer = start_tool_server(latency_ms=1000)
    supervisor = supervisor_for(dsn, server, token_key, unique("agents-continue-stopped"))
    try:
        resolve = {
            "id": "resolve",
            "tool": RESOLVE,
            "for_each": {"$ref": "docs", "pointer": "/documents"},
            "args": {"case_id": CASE_ID, "document_id": {"$item": "/document_id"}},
        }
        inner = [
            read("case", CASE),
            read("policy", POLICY, after=["case"]),
            read("docs", DOCUMENTS, after=["policy"]),
            resolve,
            read("again", CASE, after=["resolve"]),
            read("last", POLICY, after=["again"]),
        ]
        fanned = {
            **read("each", DOCUMENTS),
            "for_each": {"$ref": "own_policy", "pointer": "/required_documents"},
            "after": ["own_again"],
        }
        plan = {
            "nodes": [
                agent("research", "read in turn", *inner),
                read("own_policy", POLICY),
                read("own_case", CASE, after=["own_policy"]),
                read("own_again", CASE, after=["own_case"]),
                fanned,
            ]
        }
        first = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_fanout=2))
        await until(store, first, finished, timeout_s=90)
        stopped = await row(store, first)
        assert (stopped["status"], stopped["stop_reason"]) == ("stopped", "FANOUT_LIMIT"), stopped["detail"]
        [stopped_child] = [str(child) for child in stopped["children"]]

        continued = await supervisor.continue_run.remote(
            ContinueRequest(principal=PRINCIPAL, run_id=first, budgets=BudgetRequest(max_fanout=8))
        )
        assert continued.outcome is Submission.CREATED, continued
        second = str(continued.run_id)
        await until(store, second, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)
    earlier = await row(store, stopped_child)
    assert (earlier["status"], earlier["stop_reason"]) == ("stopped", "FANOUT_LIMIT")
    read_before = {
        event.node_id
        for event in of_kind([stored.event for stored in await store.events(stopped_child)], "node_succeeded")
    }
    assert "case" in read_before  # its first read had landed when its parent stopped it
    done = await row(store, second)
    assert done["status"] == "completed", done["detail"]
    [child_id] = [str(child) for child in done["children"]]
    calls = answered(server, child_id)
    assert not read_before & set(calls), calls  # nothing the stopped child read is read again
    assert {"case", "policy", "docs"} - read_before <= set(calls)  # what it had not read is read now
    child = await row(store, child_id)
    assert (child["status"], str(child["continues"])) == ("completed", stopped_child)


async def test_an_instruction_in_a_childs_result_is_data_and_changes_no_gate_of_its_parent(
    supervisor: Any, tool_server: RunningToolServer, store: RunStore
) -> None:
    plan = {
        "nodes": [
            {"id": "research", "agent": {"goal": "read the case", "planner": "injecting", "tools": [CASE]}},
            read("docs", DOCUMENTS, after=["research"]),
        ]
    }
    run_id = await submitted_run(supervisor, plan, NO_DOCUMENTS)
    await until(store, run_id, finished)

    parent = await load_state(store, run_id)
    research = parent.nodes["research"]
    assert research.status.value == "succeeded"
    assert research.output["result"]["summary"] == INJECTION
    assert research.output["truncated"] is False
    # The parent's gates are what they were: its principal, scopes, tools, plan and rounds.
    assert parent.principal == NO_DOCUMENTS
    assert parent.tenant_tools is None
    assert len(parent.plans) == 1
    assert [node.id for node in parent.plans[0].nodes] == ["research", "docs"]
    docs = parent.nodes["docs"]
    assert docs.status.value == "denied"
    assert docs.decision is not None
    assert not docs.decision.allowed
    assert answered(tool_server, run_id) == {}  # the parent itself called nothing
    child = await load_state(store, research.child_run_id or "")
    assert child.principal == parent.principal
    assert child.tenant_tools == frozenset({CASE})


def test_the_api_shows_the_parent_and_its_children_and_refuses_bad_agent_plans_with_a_problem(
    client: httpx.Client,
) -> None:
    headers = auth(DEMO_KEY)
    plan = {"nodes": [agent("research", "read the case", read("case", CASE))]}
    response = client.post(
        "/runs", params={"wait": 60}, json={"resource": {"case_id": CASE_ID}, "plan": plan}, headers=headers
    )
    assert response.status_code == 201, response.text
    parent = response.json()
    assert (parent["status"], parent["parent"], parent["depth"]) == ("completed", None, 0)
    (child_id,) = parent["children"]
    child = client.get(f"/runs/{child_id}", headers=headers).json()
    assert (child["parent"], child["depth"], child["children"]) == (
        {"run_id": parent["run_id"], "node_id": "research"},
        1,
        [],
    )
    (node,) = client.get(f"/runs/{parent['run_id']}/nodes", headers=headers).json()
    assert (node["node_id"], node["child_run_id"], node["status"]) == ("research", child_id, "succeeded")
    for view in ("edges", "view", "events"):  # the run's other views take an agent node as any node
        assert client.get(f"/runs/{parent['run_id']}/{view}", headers=headers).status_code == 200, view
    listed = {run["run_id"]: run for run in client.get("/runs", headers=headers).json()["items"]}
    assert listed[parent["run_id"]]["children"] == [child_id]

    too_deep: dict[str, Any] = read("case", CASE)
    for level in range(4):  # four levels of agents; three are allowed
        too_deep = agent(f"level{level}", "delegate", too_deep)
    both = {"id": "a", "agent": {"goal": "g", "planner": "outputs", "plan": {"nodes": [read("case", CASE)]}}}
    for bad, code in (({"nodes": [too_deep]}, "AGENT_TOO_DEEP"), ({"nodes": [both]}, "MALFORMED_PLAN")):
        refused = client.post("/runs", json={"resource": {"case_id": CASE_ID}, "plan": bad}, headers=headers)
        assert refused.status_code == 422, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["plan_error"]["code"] == code


async def operation_of(api: str, run_id: str, tool: str) -> dict[str, Any]:
    """The run's operation of ``tool``, once it has one, as the API shows it to a person who decides."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        deadline = time.monotonic() + 60
        while True:
            answer = await http.get(f"/runs/{run_id}/operations", headers=auth(APPROVER_KEY))
            assert answer.status_code == 200, answer.text
            found = [operation for operation in answer.json() if operation["tool"] == tool]
            if found:
                return dict(found[0])
            assert time.monotonic() < deadline, f"run {run_id} has no operation of {tool}"
            await asyncio.sleep(0.1)


async def approve(api: str, run_id: str, operation: dict[str, Any]) -> httpx.Response:
    """A person approves the run's operation through the API, quoting its arguments' hash."""
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        return await http.post(
            f"/runs/{run_id}/operations/{operation['operation_id']}/approve",
            json={"args_hash": operation["args_hash"]},
            headers=auth(APPROVER_KEY),
        )


async def parked_on_a_childs_send(
    supervisor: Any, store: RunStore, api: str, dsn: str
) -> tuple[str, str, dict[str, Any]]:
    """A parent whose one agent node's child drafts a request on a case of its own and waits for a person to
    approve sending it, once the parent is parked on that child: the parent, the child, and the send."""
    case = await copy_case(dsn)
    plan = {"nodes": [agent("request", "ask the claimant for the certificate", *draft_then_send(case))]}
    run_id = await submitted_run(supervisor, plan, resource={"case_id": case}, stage="act")
    child_id = await first_child(store, run_id)
    send = await operation_of(api, child_id, SEND)
    parked = await until(store, run_id, lambda events: of_kind(events, "run_parked"))
    assert of_kind(parked, "run_parked")[-1].waits == (f"child:{child_id}",)
    assert (await row(store, run_id))["status"] == "waiting"
    return run_id, child_id, send


async def test_a_parent_whose_child_waits_for_a_person_parks_holds_no_turn_and_ends_after_the_child(
    ray_cluster: None, dsn: str, api: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    # One turn: a parent that kept it while its child's send waits for a person would hold up every other run.
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, unique("agents-park"), max_active_runs=1)
    try:
        run_id, child_id, send = await parked_on_a_childs_send(supervisor, store, api, dsn)

        other = await submitted_run(supervisor, {"nodes": [read("case", CASE)]})
        await until(store, other, finished)
        assert (await row(store, other))["status"] == "completed"
        assert (await row(store, run_id))["finished_at"] is None  # the parent still waits, parked

        approved = await approve(api, child_id, send)
        assert approved.status_code == 200, approved.text
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)
    parent = await row(store, run_id)
    assert parent["status"] == "completed", parent["detail"]
    assert (await row(store, child_id))["status"] == "completed"
    assert of_kind(events, "run_woken")
    assert [event.child_run_id for event in of_kind(events, "agent_started")] == [child_id]  # never a second
    assert [str(child) for child in parent["children"]] == [child_id]
    assert await requests_in_outbox(dsn, send["operation_id"]) == 1  # the effect, counted at caseops' outbox
    told = await waits_told(dsn, run_id, child_id)  # the world is told what waits: the child's send, once
    assert told == [(child_id, [{"kind": "operation", "operation_id": send["operation_id"]}])]


async def waits_told(dsn: str, *run_ids: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """The ``run.waiting`` events raydag's outbox holds for ``run_ids``: each run and what it said it waits on."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT run_id, payload FROM outbox WHERE topic = 'run.waiting' AND run_id = ANY($1::uuid[])"
            " ORDER BY created_at",
            [uuid.UUID(run_id) for run_id in run_ids],
        )
    finally:
        await connection.close()
    return [(str(found["run_id"]), json.loads(found["payload"])["waits"]) for found in rows]


async def test_cancelling_a_parent_parked_on_its_child_cancels_the_child_and_its_send_is_never_made(
    ray_cluster: None, dsn: str, api: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, unique("agents-park-cancel"))
    try:
        run_id, child_id, send = await parked_on_a_childs_send(supervisor, store, api, dsn)

        await cancelled_with_its_child(supervisor, store, run_id, child_id)
    finally:
        ray.kill(supervisor)
    approved = await approve(api, child_id, send)
    assert approved.status_code == 409, approved.text  # expired with its run: nobody can approve it now
    assert await requests_in_outbox(dsn, send["operation_id"]) == 0

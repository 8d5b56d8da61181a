"""Loop agent nodes with the real things: a local Ray supervisor, PostgreSQL, the caseops MCP server over HTTP and
the mock Responses endpoint over HTTP. A loop is a child run planned step by step by the deployment's model
planner; effects are counted where they happen (the tool server's answers, the model's requests)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from actors.api.views import load_state
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.policy import TenantPolicy
from tests.c102 import CASE_OUTPUT, POLICY_OUTPUT
from tests.integration.conftest import RunningToolServer
from tests.integration.test_agents import (
    CASE,
    CASE_ID,
    DOCUMENTS,
    POLICY,
    PRINCIPAL,
    answered,
    finished,
    of_kind,
    read,
    row,
    submitted_run,
    until,
)
from tests.integration.test_openai_planner import model_supervisor
from tests.mock_openai import MockModel, Stream

DEPLOYMENT_MODEL = "gpt-test"
"""``RAYDAG_MODEL`` of ``model_supervisor``'s deployment."""
LIGHT = "gpt-light"
"""A model the tenant's policy lists beside the deployment's: an agent node may name it."""
USAGE = 812 + 164
"""Tokens the mock model reports for each answer."""


def loop_supervisor(
    dsn: str, tools: RunningToolServer, key: bytes, model: MockModel, *, streaming: bool = False
) -> Any:
    """A supervisor whose model planner asks ``model``; tenant-demo's policy also lists ``LIGHT``."""
    policies = (("tenant-demo", TenantPolicy(models=frozenset({LIGHT}))),)
    return model_supervisor(
        dsn, tools, key, model, streaming=streaming, answer_model=None, tenant_policies=policies
    )


@pytest.fixture
def supervisor(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, model: MockModel
) -> Iterator[Any]:
    import ray

    actor = loop_supervisor(dsn, tool_server, token_key, model)
    yield actor
    ray.kill(actor)


def step(node_id: str, tool: str) -> dict[str, Any]:
    """A step's plan as the model writes it under the strict schema: one read of the case."""
    node = {"id": node_id, "tool": tool, "args": {"case_id": CASE_ID}, "for_each": None, "after": []}
    return {"question": None, "nodes": [node]}


def replan(reason: str) -> dict[str, Any]:
    return {"decision": "replan", "reason": reason, "result": None, "citations": []}


FINAL = {
    "decision": "final",
    "reason": "the case and its policy are read",
    "result": {
        "summary": "C-102 waits for its accident certificate",
        "findings": [{"name": "policy", "value": POLICY_OUTPUT["evidence_ref"]}],
    },
    "citations": [CASE_OUTPUT["evidence_ref"], POLICY_OUTPUT["evidence_ref"]],
}


def loop_node(max_steps: int, *, tools: list[str], **body: Any) -> dict[str, Any]:
    return {
        "id": "research",
        "agent": {
            "goal": "find what C-102 still lacks",
            "loop": {"max_steps": max_steps},
            "tools": tools,
            **body,
        },
        "args": {"case": {"$ref": "case"}},
        "after": ["case"],
    }


def sent(request: dict[str, Any]) -> str:
    return json.dumps(request["input"])


async def test_a_loop_agent_answers_with_its_models_final_answer_as_the_nodes_bounded_result(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    model.answer_json(step("snapshot", CASE))
    model.answer_json(replan("the policy is not read yet"))
    model.answer_json(step("policy", POLICY))
    model.answer_json(FINAL)
    plan = {"nodes": [read("case", CASE), loop_node(3, tools=[CASE, POLICY], model=LIGHT)]}

    run_id = await submitted_run(supervisor, plan)
    await until(store, run_id, finished)

    parent = await load_state(store, run_id)
    research = parent.nodes["research"]
    assert parent.status.value == "completed", parent.detail
    child_id = research.child_run_id or ""
    assert research.output == {"run_id": child_id, "result": FINAL["result"], "truncated": False}
    child = await load_state(store, child_id)
    assert (child.status.value, child.round, child.planner, child.model) == ("completed", 2, "openai", LIGHT)
    assert child.parent is not None
    assert child.parent.max_steps == 3
    assert answered(tool_server, child_id) == {"snapshot": 1, "r2.policy": 1}  # one call per step
    assert answered(tool_server, run_id) == {"case": 1}
    # Each step is a proposal and a judgement, asked of the node's model; the inputs are data in each.
    assert [request["text"]["format"]["name"] for request in model.requests] == [
        "raydag_plan",
        "raydag_join",
    ] * 2
    assert {request["model"] for request in model.requests} == {LIGHT}
    for request in model.requests:
        assert "<inputs>" in sent(request)
        assert CASE_OUTPUT["evidence_ref"] in sent(request)  # the input the parent resolved for it
    assert "r2.policy" not in sent(model.requests[0])
    # The child's model calls are its own spend, folded into its parent's when it ended.
    assert child.tokens_used == 4 * USAGE
    assert parent.tokens_used == child.tokens_used
    assert child.budgets.max_tokens <= parent.budgets.max_tokens


async def test_a_loop_that_never_answers_stops_at_max_steps_and_fails_its_node_step_limit(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    model.answer_json(step("snapshot", CASE))
    model.answer_json(replan("not sure yet"))
    model.answer_json(step("policy", POLICY))
    model.answer_json(replan("still not sure"))
    plan = {"nodes": [read("case", CASE), loop_node(2, tools=[CASE, POLICY])]}

    run_id = await submitted_run(supervisor, plan)
    await until(store, run_id, finished)

    parent = await load_state(store, run_id)
    research = parent.nodes["research"]
    assert research.error is not None
    assert (research.status.value, research.error.code) == ("failed", "STEP_LIMIT")
    child = await load_state(store, research.child_run_id or "")
    assert (child.status.value, child.stop_reason, child.round) == ("stopped", "STEP_LIMIT", 2)
    assert child.detail == "still not sure: the loop took its 2 steps without a final answer"
    assert len(model.requests) == 4  # no third step was asked for
    # Each prompt told the model its step; only the last step's said it was the last.
    assert ["step 1 of at most 2" in sent(request) for request in model.requests] == [
        True,
        True,
        False,
        False,
    ]
    assert ["It is the last" in sent(request) for request in model.requests] == [False, False, True, True]
    assert {request["model"] for request in model.requests} == {DEPLOYMENT_MODEL}
    assert answered(tool_server, child.run_id) == {"snapshot": 1, "r2.policy": 1}


async def test_a_loop_refused_its_model_or_its_first_model_call_is_refused_before_any_model_is_asked(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    # A model outside the tenant's policy is refused with the run, naming the agent that asks for it.
    refused = await supervisor.submit.remote(
        RunRequest(
            principal=PRINCIPAL,
            resource={"case_id": CASE_ID},
            plan={"nodes": [read("case", CASE), loop_node(3, tools=[CASE], model="gpt-expensive")]},
        )
    )
    assert refused.outcome is Submission.MODEL_NOT_ALLOWED
    problem = refused.refusal()
    assert problem is not None
    assert (problem.status, problem.problem) == (422, "model-not-allowed")
    assert problem.detail.startswith(
        "the agent at /nodes/1/agent/model: model 'gpt-expensive' is not allowed"
    )
    assert refused.error["at"] == "/nodes/1/agent/model"
    assert sorted(refused.error["allowed"]) == sorted([DEPLOYMENT_MODEL, LIGHT])
    # A child that can afford no model call fails its node before it is named.
    plan = {
        "nodes": [
            read("case", CASE),
            {**loop_node(3, tools=[CASE], budgets={"max_tokens": 0}), "id": "broke"},
        ]
    }

    run_id = await submitted_run(supervisor, plan)
    await until(store, run_id, finished)

    parent = await load_state(store, run_id)
    broke = parent.nodes["broke"]
    assert broke.error is not None
    assert (broke.status.value, broke.error.code) == ("failed", "AGENT_BUDGET_EXHAUSTED")
    assert broke.child_run_id is None  # refused by its carving, before its child was named
    assert (await row(store, run_id))["children"] == []
    assert model.requests == []  # no model was asked, for either
    assert answered(tool_server, run_id) == {"case": 1}


async def test_a_loop_that_cannot_afford_its_first_model_calls_worst_case_is_refused_before_its_model_is_asked(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    plan = {"nodes": [read("case", CASE), loop_node(3, tools=[CASE, POLICY])]}

    poor = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_tokens=3_000))
    await until(store, poor, finished)

    research = (await load_state(store, poor)).nodes["research"]
    assert research.error is not None
    assert (research.status.value, research.error.code) == ("failed", "AGENT_FIRST_CALL_UNAFFORDABLE")
    worst = re.search(r"it may take up to (\d+) tokens \((\d+) in, 4096 out\)", research.error.message)
    assert worst is not None, research.error.message
    assert "is given max_tokens 3000" in research.error.message
    assert "(max_tokens falls short)" in research.error.message
    assert (await row(store, poor))["children"] == []  # named, never created
    assert model.requests == []  # counted at the model: its first call was never made
    assert answered(tool_server, poor) == {"case": 1}

    # A parent that can pay for exactly that worst case runs the loop, which spends what the model reports.
    model.answer_json(
        {"question": None, "nodes": [*step("snapshot", CASE)["nodes"], *step("policy", POLICY)["nodes"]]}
    )
    model.answer_json(FINAL)
    enough = await submitted_run(supervisor, plan, budgets=BudgetRequest(max_tokens=int(worst[1])))
    await until(store, enough, finished)

    parent = await load_state(store, enough)
    assert parent.status.value == "completed", parent.detail
    child = await load_state(store, parent.nodes["research"].child_run_id or "")
    assert (child.status.value, child.budgets.max_tokens, child.tokens_used) == (
        "completed",
        int(worst[1]),
        2 * USAGE,
    )
    assert len(model.requests) == 2
    assert answered(tool_server, child.run_id) == {"snapshot": 1, "policy": 1}


async def test_a_call_the_loops_model_proposes_outside_its_tools_is_refused_by_its_schema_and_never_made(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    model.answer_json(step("docs", DOCUMENTS))
    model.answer_json(step("docs", DOCUMENTS))  # asked to repair, it insists
    plan = {"nodes": [read("case", CASE), loop_node(3, tools=[CASE])]}

    run_id = await submitted_run(supervisor, plan)
    events = await until(store, run_id, finished)

    (started,) = of_kind(events, "agent_started")
    child = await load_state(store, started.child_run_id)
    assert (child.status.value, child.stop_reason) == ("needs_human", "PLANNER_CONTRACT_VIOLATION")
    assert child.nodes == {}
    assert answered(tool_server, child.run_id) == {}  # counted at the tool server: no call was made
    schema = json.dumps(model.requests[0]["text"]["format"]["schema"])
    assert CASE in schema
    assert DOCUMENTS not in schema  # the model is offered the node's tools only


async def test_a_streamed_call_outside_the_loops_tools_is_denied_by_policy_and_never_made(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    model: MockModel,
    store: RunStore,
) -> None:
    import ray

    # A streamed plan is validated node by node against the catalogue, not the model's schema: the policy of
    # the child run, whose tools are the node's, is what stops the call.
    streaming = loop_supervisor(dsn, tool_server, token_key, model, streaming=True)
    try:
        model.answer(Stream(in_pieces(step("docs", DOCUMENTS))))
        model.answer_json(
            {"decision": "needs_human", "reason": "no documents", "result": None, "citations": []}
        )
        run_id = await submitted_run(streaming, {"nodes": [read("case", CASE), loop_node(3, tools=[CASE])]})
        events = await until(store, run_id, finished)
    finally:
        ray.kill(streaming)

    (started,) = of_kind(events, "agent_started")
    child = await load_state(store, started.child_run_id)
    docs = child.nodes["docs"]
    assert docs.status.value == "denied"
    assert docs.decision is not None
    assert not docs.decision.allowed
    assert answered(tool_server, child.run_id) == {}  # counted at the tool server: no call was made
    assert child.tenant_tools == frozenset({CASE})
    research = (await load_state(store, run_id)).nodes["research"]
    assert research.error is not None
    assert (research.status.value, research.error.code) == ("failed", "INSUFFICIENT_EVIDENCE")


def in_pieces(value: Any, pieces: int = 4) -> list[str]:
    """``value`` as JSON, cut into ``pieces`` deltas of a stream."""
    text = json.dumps(value)
    size = -(-len(text) // pieces)
    return [text[start : start + size] for start in range(0, len(text), size)]


async def test_a_model_planned_run_delegates_to_a_loop_agent_it_wrote_and_answers_with_its_result(
    supervisor: Any, model: MockModel, tool_server: RunningToolServer, store: RunStore
) -> None:
    case = {"id": "case", "tool": CASE, "args": {"case_id": CASE_ID}, "for_each": None, "after": []}
    research = {
        "id": "research",
        "agent": {"goal": "read the policy of this case", "loop": {"max_steps": 2}, "tools": [POLICY]},
        "inputs": [{"name": "case", "ref": "case", "pointer": "/evidence_ref"}],
        "after": [],
    }
    child_final = {
        "decision": "final",
        "reason": "the policy is read",
        "result": {"summary": "the policy asks for three documents", "findings": []},
        "citations": [POLICY_OUTPUT["evidence_ref"]],
    }
    parent_final = {**FINAL, "citations": [CASE_OUTPUT["evidence_ref"]]}
    model.answer_json({"question": None, "nodes": [case, research]})  # the parent's plan
    model.answer_json(step("policy", POLICY))  # the child's one step: its plan, then its answer
    model.answer_json(child_final)
    model.answer_json(parent_final)  # the parent's join

    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"case_id": CASE_ID}, planner="openai")
    )
    await until(store, str(submitted.run_id), finished)

    parent = await load_state(store, str(submitted.run_id))
    assert parent.status.value == "completed", parent.detail
    assert dict(parent.result or {}) == parent_final["result"]
    node = parent.nodes["research"]
    child = await load_state(store, node.child_run_id or "")
    assert node.output == {"run_id": child.run_id, "result": child_final["result"], "truncated": False}
    assert (child.planner, child.parent.max_steps if child.parent else None) == ("openai", 2)
    assert child.parent is not None
    assert child.parent.inputs == {"case": CASE_OUTPUT["evidence_ref"]}
    assert child.tenant_tools == frozenset({POLICY})
    assert answered(tool_server, parent.run_id) == {"case": 1}
    assert answered(tool_server, child.run_id) == {"policy": 1}
    branches = model.requests[0]["text"]["format"]["schema"]["properties"]["nodes"]["items"]["anyOf"]
    assert any("agent" in branch["properties"] for branch in branches)  # the model was offered agents
    assert CASE_OUTPUT["evidence_ref"] in sent(model.requests[1])  # the child's prompt carries its input

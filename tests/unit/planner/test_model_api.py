"""The two wire APIs' requests, the bounds the schemas carry, and what an unreported call is charged."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mcp_server.contracts import CASEOPS_TOOLS
from planner.answer import Answer
from planner.base import PlanningContext, ToolSpec, proposal_bound
from planner.context import planner_input
from planner.model_api import (
    SCHEMA_INSTRUCTIONS,
    ModelApi,
    chat_request,
    estimated_tokens,
    responses_request,
)
from planner.openai_planner import OpenAIPlanner, OpenAISettings
from planner.outputs import OutputsPlanner
from planner.strict_schema import MAX_CITATIONS, join_schema, plan_schema, strict_violations

TOOLS = [ToolSpec.of(contract) for contract in CASEOPS_TOOLS.values()]
MESSAGES = [{"role": "system", "content": "plan"}, {"role": "user", "content": "Goal: check C-102"}]


def test_the_plan_schema_bounds_its_nodes_and_each_nodes_after_and_stays_strict() -> None:
    schema = plan_schema(TOOLS, may_ask=True, max_nodes=7)

    assert schema["properties"]["nodes"]["maxItems"] == 7
    branches = schema["properties"]["nodes"]["items"]["anyOf"]
    assert {branch["properties"]["after"]["maxItems"] for branch in branches} == {7}
    assert strict_violations(schema) == []


def test_the_plan_schema_offers_models_no_agent_node_yet() -> None:
    branches = plan_schema(TOOLS)["properties"]["nodes"]["items"]["anyOf"]

    assert all("agent" not in branch["properties"] and "tool" in branch["required"] for branch in branches)


def test_the_join_schema_bounds_its_citations() -> None:
    schema = join_schema(Answer.model_json_schema())

    assert schema["properties"]["citations"]["maxItems"] == MAX_CITATIONS
    assert strict_violations(schema) == []


def test_a_responses_request_is_strict_unstored_and_bounded() -> None:
    request = responses_request(MESSAGES, "raydag_plan", {"type": "object"}, "gpt-test", 300)

    assert request == {
        "model": "gpt-test",
        "input": MESSAGES,
        "text": {
            "format": {
                "type": "json_schema",
                "name": "raydag_plan",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
        "store": False,
        "max_output_tokens": 300,
    }


def test_a_chat_request_asks_for_a_json_object_and_states_the_schema_in_a_system_message() -> None:
    schema = plan_schema(TOOLS, may_ask=True, max_nodes=5)

    request = chat_request(MESSAGES, schema, "smollm2", 256)

    assert request["response_format"] == {"type": "json_object", "schema": schema}
    assert request["messages"][:2] == MESSAGES
    stated = request["messages"][2]
    assert stated["role"] == "system"
    assert stated["content"].startswith(SCHEMA_INSTRUCTIONS)
    assert json.loads(stated["content"].removeprefix(SCHEMA_INSTRUCTIONS)) == schema
    assert (request["model"], request["max_tokens"], request["temperature"]) == ("smollm2", 256, 0)


def test_an_unreported_call_is_charged_at_least_a_token_per_byte_sent_and_received() -> None:
    schema = {"type": "object", "description": "é" * 10}
    output = '{"nodes": []}'

    tokens = estimated_tokens(MESSAGES, schema, output)

    sent = sum(len(message["content"].encode()) for message in MESSAGES)
    assert tokens.input >= sent + len(json.dumps(schema, ensure_ascii=False).encode())
    assert tokens.output >= len(output)


def test_an_empty_unreported_answer_still_costs_something() -> None:
    assert estimated_tokens([], {}, "").output > 0


def test_streamed_plans_over_chat_completions_cannot_make_a_planner() -> None:
    settings = OpenAISettings(api_key="sk-test", api=ModelApi.CHAT, streaming=True)

    with pytest.raises(ValueError, match="streamed plans need the Responses API"):
        OpenAIPlanner(settings)


def test_the_model_planner_names_its_default_model() -> None:
    planner = OpenAIPlanner(OpenAISettings(api_key="sk-test", model="gpt-test", api=ModelApi.CHAT))

    assert planner.default_model == "gpt-test"


def test_a_plan_requests_worst_case_counts_a_token_per_byte_sent_its_output_cap_and_their_price() -> None:
    settings = OpenAISettings(
        api_key="sk-test",
        model="gpt-test",
        max_output_tokens=512,
        input_usd_per_mtok=2.0,
        output_usd_per_mtok=8.0,
    )
    planner = OpenAIPlanner(settings)
    context = PlanningContext(
        resource={"case_id": "C-102"}, goal="check C-102", tools=TOOLS, inputs={"case": {"id": "C-102"}}
    )

    bound = proposal_bound(planner, context)

    assert bound is not None
    messages = planner_input(context, may_ask=True)
    schema = json.dumps(plan_schema(TOOLS, may_ask=True), separators=(",", ":"))
    sent = sum(len(message["content"].encode()) for message in messages) + len(schema.encode())
    assert sent <= bound.input_tokens <= sent + 100  # a token per byte sent, and little more
    assert (bound.model, bound.output_tokens) == ("gpt-test", 512)
    assert bound.cost_usd == pytest.approx((bound.input_tokens * 2.0 + 512 * 8.0) / 1e6)
    named = proposal_bound(planner, replace(context, model="gpt-light"))
    assert named is not None
    assert named.model == "gpt-light"


def test_a_planner_that_asks_no_model_has_no_request_to_bound() -> None:
    context = PlanningContext(resource={"case_id": "C-102"}, goal="check C-102", tools=TOOLS)

    assert proposal_bound(OutputsPlanner(), context) is None

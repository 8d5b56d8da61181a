"""The model planner over Chat Completions, against a mock that behaves like llama.cpp's server (404 on the
Responses API, 500 on a strict ``json_schema``), through the real runtime: Ray, the MCP server and
PostgreSQL. Also: usage an endpoint does not report, and the plan's model chosen per run under tenant policy."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.policy import TenantPolicy
from planner.model_api import ModelApi
from planner.openai_planner import OpenAISettings
from tests.c102 import C102_RESULT, FINAL
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_openai_planner import MODEL_PLAN, PRINCIPAL, run, state_events
from tests.mock_chat import Answer, MockChatModel

ALLOWED = "smollm2-360m"
"""A model tenant-demo's policy lets its runs name, beside the deployment's ``smollm2``."""


@pytest.fixture
def chat() -> Iterator[MockChatModel]:
    mock = MockChatModel().start()
    yield mock
    mock.stop()


def chat_supervisor(
    dsn: str, tools: RunningToolServer, key: bytes, chat: MockChatModel, *, api: ModelApi = ModelApi.CHAT
) -> Any:
    settings = OpenAISettings(
        api_key="sk-test-not-a-real-key",
        base_url=chat.url,
        model="smollm2",
        api=api,
        max_retries=0,
        max_output_tokens=512,
        max_plan_nodes=12,
        answer_model="mcp_server.planner:DocumentCheckResult",
    )
    policies = (("tenant-demo", TenantPolicy(models=frozenset({ALLOWED}))),)
    return supervisor_for(
        dsn, tools, key, f"chat-{uuid.uuid4().hex[:8]}", openai=settings, tenant_policies=policies
    )


@pytest.fixture
def supervisor(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, chat: MockChatModel
) -> Iterator[Any]:
    import ray

    actor = chat_supervisor(dsn, tool_server, token_key, chat)
    yield actor
    ray.kill(actor)


async def used(store: RunStore, run_id: str) -> list[Any]:
    return [event for event in state_events(await store.events(run_id)) if event.kind == "model_used"]


async def test_a_chat_completions_run_completes_with_json_object_and_the_schema_stated(
    supervisor: Any, chat: MockChatModel, store: RunStore
) -> None:
    chat.answer(Answer(MODEL_PLAN), Answer(FINAL))

    state = await run(supervisor, store)

    assert (state.status.value, dict(state.result or {})) == ("completed", C102_RESULT)
    assert [path for path, _ in chat.requests] == ["/v1/chat/completions"] * 2
    for body in chat.completions:
        assert (body["model"], body["max_tokens"], body["temperature"]) == ("smollm2", 512, 0)
        assert body["response_format"]["type"] == "json_object"
        stated = body["messages"][-1]
        assert stated["role"] == "system"
        assert json.loads(stated["content"].split("\n", 1)[1]) == body["response_format"]["schema"]
        assert "tenant-demo" not in json.dumps(body)
        assert "sk-test" not in json.dumps(body)
    plan_schema = chat.completions[0]["response_format"]["schema"]
    assert plan_schema["properties"]["nodes"]["maxItems"] == 12
    assert [
        (e.purpose, e.input_tokens, e.output_tokens, e.reported) for e in await used(store, state.run_id)
    ] == [
        ("plan", 900, 120, True),
        ("join", 900, 120, True),
    ]
    assert (state.tokens_used, state.unreported_model_calls) == (2 * 1020, 0)


async def test_an_answer_that_is_not_json_gets_one_repair_over_chat(
    supervisor: Any, chat: MockChatModel, store: RunStore
) -> None:
    chat.answer(Answer("Sure! Here is the plan you asked for."), Answer(MODEL_PLAN), Answer(FINAL))

    state = await run(supervisor, store)

    assert state.status.value == "completed"
    repair = chat.completions[1]["messages"]
    assert "did not match the required schema (not JSON" in repair[-2]["content"]
    assert len(chat.completions) == 3


async def test_usage_the_endpoint_does_not_report_is_charged_an_upper_bound_and_said_unreported(
    supervisor: Any, chat: MockChatModel, store: RunStore
) -> None:
    chat.answer(Answer(MODEL_PLAN, tokens=None), Answer(FINAL, tokens=None))

    state = await run(supervisor, store)

    assert state.status.value == "completed"
    events = await used(store, state.run_id)
    assert [(event.purpose, event.reported) for event in events] == [("plan", False), ("join", False)]
    plan_sent = len(json.dumps(chat.completions[0]["messages"][:-1]))
    assert events[0].input_tokens > plan_sent // 2  # never counted as zero: at least the bytes it was sent
    assert events[0].output_tokens >= len(json.dumps(MODEL_PLAN))
    assert all(event.cost_usd > 0 for event in events)
    assert state.unreported_model_calls == 2


async def test_a_cost_budget_is_still_a_hard_limit_when_usage_goes_unreported(
    supervisor: Any, chat: MockChatModel, store: RunStore
) -> None:
    chat.answer(Answer(MODEL_PLAN, tokens=None), Answer(FINAL, tokens=None))

    state = await run(supervisor, store, budgets=BudgetRequest(max_cost_usd=0.0001))

    assert (state.status.value, state.stop_reason) == ("stopped", "COST_BUDGET_EXHAUSTED")
    assert state.result is None


async def test_the_responses_api_against_a_chat_only_server_fails_the_run_as_a_planner_error(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    chat: MockChatModel,
    store: RunStore,
) -> None:
    import ray

    actor = chat_supervisor(dsn, tool_server, token_key, chat, api=ModelApi.RESPONSES)
    try:
        state = await run(actor, store)
    finally:
        ray.kill(actor)

    assert (state.status.value, state.stop_reason) == ("failed", "PLANNER_ERROR")
    assert "NotFoundError" in (state.detail or "")
    assert [path for path, _ in chat.requests] == ["/v1/responses"]


async def test_a_run_may_plan_with_a_model_its_tenant_allows(
    supervisor: Any, chat: MockChatModel, store: RunStore
) -> None:
    chat.answer(Answer(MODEL_PLAN), Answer(FINAL))

    state = await run(supervisor, store, model=ALLOWED)

    assert state.status.value == "completed"
    assert [body["model"] for body in chat.completions] == [ALLOWED, ALLOWED]
    assert {event.model for event in await used(store, state.run_id)} == {ALLOWED}


async def test_a_model_the_tenant_does_not_allow_is_refused_at_submission_and_no_model_is_asked(
    supervisor: Any, chat: MockChatModel
) -> None:
    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, planner="openai", model="gpt-5-pro")
    )

    assert submitted.outcome is Submission.MODEL_NOT_ALLOWED
    refusal = submitted.refusal()
    assert refusal is not None
    assert (refusal.status, refusal.problem) == (422, "model-not-allowed")
    assert refusal.fields["allowed"] == ["smollm2", ALLOWED]
    assert chat.requests == []

"""A server's question inside a plain ``tools/call`` (no task): server-everything's ``trigger-elicitation-request``
sends ``elicitation/create`` mid-call and reports what it was answered. The question waits in the run's inbox
while the run's other branch goes on; a person answers through the API, and the answer reaches the server, whose
result names it; a decline reaches it as a decline; a question nobody answers before the call's deadline is
answered ``cancel``. Over Streamable HTTP (a proxy in front of the server records what it was sent) and over stdio
(a tap on the server's stdin), never in raydag's records."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.calls.call import HELD_SESSION, ExecutorKind
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE
from actors.toolsets.config import Toolsets, parse_toolsets
from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth, raydag_cli, supervisor_for
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_durability import until
from tests.integration.test_mcp_tasks import PRINCIPAL, CountingProxy, everything_proxied, name  # noqa: F401
from tests.integration.test_mcp_tasks_stdio import everything_stdio, wire_of
from tests.integration.test_operations import finished, problem, wait_for
from tests.integration.test_tool_questions import (
    APPROVER_KEY,
    answered_on_card,
    asked,
    events_of,
    question_card,
)
from tests.integration.toolset_servers import toy_toolsets

ASK = "trigger-elicitation-request"
TOOLS = f"""\
      {ASK}: {{scope: demo:read, risk: read_only}}
      echo: {{scope: demo:read, risk: read_only}}
"""


def over_http(url: str, call_s: float = 60) -> Toolsets:
    text = f"""\
servers:
  - name: everything
    transport: streamable-http
    url: {url}
    timeouts: {{call_s: {call_s}}}
    tools:
{TOOLS}"""
    return parse_toolsets(text, "everything.yaml", {})


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CountingProxy]]:
    """server-everything behind a proxy that records what the server is sent (and lists its asking tool as
    read-only: server-everything says it writes, and it writes nothing)."""
    with everything_proxied(tmp_path_factory.mktemp("everything") / "server.log", read_only=(ASK,)) as served:
        yield served


@pytest.fixture
def start(
    ray_cluster: None,
    scratch_dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,  # noqa: F811
) -> Callable[..., str]:
    """Start an API of the test's own over ``toolsets`` (``supervisor``: its supervisor's settings): its URL."""

    def started(toolsets: Toolsets, **supervisor: Any) -> str:
        config = api_config(scratch_dsn, tool_server.url, token_key, toolsets=toolsets, **supervisor)
        return str(serve_api(config))

    return started


@pytest.fixture(params=[ExecutorKind.CALLERS, ExecutorKind.SUPERVISOR])
def http_api(
    request: pytest.FixtureRequest, start: Callable[..., str], proxied: tuple[str, CountingProxy]
) -> tuple[str, CountingProxy]:
    """An API over server-everything, its calls made by a caller or by the supervisor's own loop (either holds
    a plain call its server asks in)."""
    url, proxy = proxied
    return start(over_http(url), tool_executor=request.param), proxy


def asking_run(client: httpx.Client) -> str:
    """A run of the asking tool beside an independent echo node."""
    plan = {
        "nodes": [
            {"id": "ask", "tool": ASK, "args": {}},
            {"id": "beside", "tool": "echo", "args": {"message": "the other branch"}},
        ]
    }
    created = client.post("/runs", json={"plan": plan, "stage": "investigate"}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    return str(created.json()["run_id"])


def output_of(client: httpx.Client, run_id: str, node_id: str = "ask") -> str:
    [succeeded] = [
        event
        for event in events_of(client, run_id)
        if event["kind"] == "node_succeeded" and event["node_id"] == node_id
    ]
    return "\n".join(block.get("text", "") for block in succeeded["output"]["content"])


def beside_done(client: httpx.Client, run_id: str, within_s: float = 60) -> None:
    """The run's other branch finished while the question waits."""
    deadline = time.monotonic() + within_s
    while not any(
        event["kind"] == "node_succeeded" and event["node_id"] == "beside"
        for event in events_of(client, run_id)
    ):
        assert time.monotonic() < deadline, "the other branch waited on the question"
        time.sleep(0.2)


def questions_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY))
    assert listed.status_code == 200, listed.text
    return list(listed.json())


def test_a_plain_calls_question_is_answered_through_the_api_and_the_server_goes_on_with_the_answer(
    http_api: tuple[str, CountingProxy],
) -> None:
    base, proxy = http_api
    with httpx.Client(base_url=base, timeout=30) as client:
        before, answers_before = proxy.tools[ASK], len(proxy.answers)
        run_id = asking_run(client)
        item = asked(client, run_id)
        assert (item["server"], item["tool"], item["node_id"]) == ("everything", ASK, "ask")
        assert item["message"] == "Please provide inputs for the following fields:"  # the server's own words
        assert item["requested_schema"]["required"] == ["name"]
        beside_done(client, run_id)
        route = f"/runs/{run_id}/tool-questions/{item['question_id']}/answer"
        assert problem(client.post(route, json={"content": {"check": True}}, headers=auth(APPROVER_KEY))) == (
            422,
            "tool-answer-invalid",
        )  # no name: the server's schema requires one
        answer = {"content": {"name": "Ada Lovelace", "check": True}}
        answered = client.post(route, json=answer, headers=auth(APPROVER_KEY))
        assert answered.status_code == 200, answered.text
        run = wait_for(client, run_id, finished, within_s=90)
        text = output_of(client, run_id)
        listed = questions_of(client, run_id)

    assert run["status"] == "completed", run
    assert "- Name: Ada Lovelace" in text  # the server's own result names what it was answered
    # What reached the server: one call of the tool, and the person's answer as the server's request's result.
    assert proxy.tools[ASK] == before + 1
    assert proxy.answers[answers_before:] == [{"action": "accept", "content": answer["content"]}]
    assert [question["state"] for question in listed] == ["answered"]


def test_a_declined_plain_calls_question_reaches_the_server_as_a_decline(
    http_api: tuple[str, CountingProxy],
) -> None:
    base, proxy = http_api
    with httpx.Client(base_url=base, timeout=30) as client:
        answers_before = len(proxy.answers)
        run_id = asking_run(client)
        item = asked(client, run_id)
        declined = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/decline", headers=auth(APPROVER_KEY)
        )
        assert declined.status_code == 200, declined.text
        run = wait_for(client, run_id, finished, within_s=90)
        text = output_of(client, run_id)

    assert run["status"] == "completed", run  # the server goes on as it decides: this one reports the decline
    assert "User declined" in text
    assert proxy.answers[answers_before:] == [{"action": "decline"}]


def test_a_question_nobody_answers_before_the_calls_deadline_is_cancelled_at_the_server(
    start: Callable[..., str], proxied: tuple[str, CountingProxy]
) -> None:
    url, proxy = proxied
    base = start(over_http(url, call_s=6))
    with httpx.Client(base_url=base, timeout=30) as client:
        answers_before = len(proxy.answers)
        run_id = asking_run(client)
        item = asked(client, run_id)
        run = wait_for(client, run_id, finished, within_s=90)
        text = output_of(client, run_id)
        listed = questions_of(client, run_id)
        late = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/answer",
            json={"content": {"name": "too late"}},
            headers=auth(APPROVER_KEY),
        )

    assert run["status"] == "completed", run
    assert "User cancelled" in text  # the server was told, and went on as it decides
    assert proxy.answers[answers_before:] == [{"action": "cancel"}]
    assert [question["state"] for question in listed] == ["expired"]
    assert problem(late) == (409, "tool-question-expired")


def test_a_stdio_servers_question_in_a_plain_call_is_answered_through_the_api(
    start: Callable[..., str], tmp_path: Path
) -> None:
    wire = tmp_path / "wire.jsonl"
    base = start(everything_stdio(wire, TOOLS, read_only=ASK))
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = asking_run(client)
        item = asked(client, run_id)
        assert (item["server"], item["tool"]) == ("everything", ASK)
        answer = {"content": {"name": "Grace Hopper"}}
        route = f"/runs/{run_id}/tool-questions/{item['question_id']}/answer"
        answered = client.post(route, json=answer, headers=auth(APPROVER_KEY))
        assert answered.status_code == 200, answered.text
        run = wait_for(client, run_id, finished, within_s=90)
        text = output_of(client, run_id)

    assert run["status"] == "completed", run
    assert "- Name: Grace Hopper" in text
    seen = wire_of(wire)
    assert [
        entry["tool"] for entry in seen if entry.get("method") == "tools/call" and entry["tool"] == ASK
    ] == [ASK]
    assert [entry["answer"] for entry in seen if "answer" in entry] == [
        {"action": "accept", "content": {"name": "Grace Hopper"}}
    ]


def asking(events: list[Any]) -> list[dict[str, Any]]:
    """Each handle of a held call recorded while its question waited."""
    return [
        event.task
        for event in events
        if event.kind == "node_task_updated" and event.task["question"] is not None
    ]


async def test_a_caller_killed_while_its_calls_question_waits_loses_the_call_and_the_read_is_made_again(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,  # noqa: F811
    proxied: tuple[str, CountingProxy],
) -> None:
    """A held call lives in the caller that made it: killed, the call is lost with it (``TASK_LOST``), and the
    read is made again under the retry policy, which asks again."""
    import ray

    url, proxy = proxied
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=over_http(url), tool_callers=1)
    try:
        before = proxy.tools[ASK]
        created = await supervisor.submit.remote(
            RunRequest(
                principal=PRINCIPAL,
                resource={},
                plan={"nodes": [{"id": "ask", "tool": ASK, "args": {}}]},
                planner="outputs",
                stage="investigate",
            )
        )
        assert created.outcome is Submission.CREATED, created
        run_id = str(created.run_id)
        await until(store, run_id, lambda events: len(asking(events)) >= 1)
        ray.kill(ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE), no_restart=False)
        events = await until(
            store, run_id, lambda events: len({task["task_id"] for task in asking(events)}) >= 2, timeout_s=90
        )
    finally:
        ray.kill(supervisor)

    first, again = asking(events)[0], asking(events)[-1]
    assert first["session"].startswith(HELD_SESSION)
    assert first["question"]["schema"]["required"] == ["name"]
    assert again["session"] != first["session"]  # asked again, by the call made in the restarted caller
    retried = [event.error.code for event in events if event.kind == "node_retry_scheduled"]
    assert retried == ["TASK_LOST"]
    assert proxy.tools[ASK] == before + 2  # the read was made again, once, at the server


def over_toy_stdio() -> Toolsets:
    """The tests' toy server over stdio, in the 2025-11-25 era: its ``confirm`` fails ``NOT_CONFIRMED`` unless
    its client confirmed, its ``open_link`` asks its client to open a link."""
    asking_tools = """\
      confirm: {scope: demo:read, risk: read_only}
      open_link: {scope: demo:read, risk: read_only}
"""
    return toy_toolsets("2025-11-25", extra_tools=asking_tools, call_s=60)


def one_node_run(client: httpx.Client, tool: str, args: dict[str, Any]) -> str:
    plan = {"nodes": [{"id": "ask", "tool": tool, "args": args}]}
    created = client.post("/runs", json={"plan": plan, "stage": "investigate"}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    return str(created.json()["run_id"])


def failure_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    [failed] = [event for event in events_of(client, run_id) if event["kind"] == "node_failed"]
    return dict(failed["error"])


def test_a_question_answered_from_the_cli_and_one_declined_reach_the_tool_which_fails_its_node_on_the_decline(
    start: Callable[..., str],
) -> None:
    base = start(over_toy_stdio())
    with httpx.Client(base_url=base, timeout=30) as client:
        sealed = one_node_run(client, "confirm", {"bundle": "bundle-1"})
        item = asked(client, sealed)
        assert (item["server"], item["tool"], item["message"]) == ("toy", "confirm", "Seal bundle-1?")
        answered = raydag_cli(
            "questions",
            "answer-tool",
            sealed,
            item["question_id"],
            "--content",
            json.dumps({"seal": True}),
            url=base,
            key=APPROVER_KEY,
        )
        assert answered.returncode == 0, answered.stderr
        declined_run = one_node_run(client, "confirm", {"bundle": "bundle-2"})
        declined = asked(client, declined_run)
        refused = client.post(
            f"/runs/{declined_run}/tool-questions/{declined['question_id']}/decline",
            headers=auth(APPROVER_KEY),
        )
        assert refused.status_code == 200, refused.text
        wait_for(client, sealed, finished, within_s=90)
        wait_for(client, declined_run, finished, within_s=90)
        text = output_of(client, sealed)
        failure = failure_of(client, declined_run)

    assert "sealed bundle-1" in text  # the tool's own result: it was answered seal: true
    assert (failure["kind"], failure["code"]) == ("business", "NOT_CONFIRMED")
    assert "answered decline" in failure["message"]  # what the tool says it was answered


def test_a_url_elicitation_in_a_plain_call_is_declined_at_once_and_never_reaches_the_inbox(
    start: Callable[..., str],
) -> None:
    base = start(over_toy_stdio())
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = one_node_run(client, "open_link", {"url": "https://example.com/consent"})
        wait_for(client, run_id, finished, within_s=90)
        failure = failure_of(client, run_id)
        listed = questions_of(client, run_id)

    assert (failure["code"], failure["message"]) == ("LINK_NOT_OPENED", "the client answered decline")
    assert listed == []


def test_a_plain_calls_question_is_answered_from_the_run_viewer_and_the_tool_goes_on_with_it(
    start: Callable[..., str], tmp_path: Path
) -> None:
    """In Debian's headless Chromium: the card of the toy's question shows the server's words as text and a
    box for its yes/no, and posts what the box says as the answer's content, with the approver's key."""
    base = start(over_toy_stdio())
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = one_node_run(client, "confirm", {"bundle": "<b>bundle-3</b>"})
        item = asked(client, run_id)
        assert item["message"] == "Seal <b>bundle-3</b>?"  # the server's words, shown as text on the card
        with question_card(base, run_id, item, tmp_path) as (browser, pending, selector):
            box = f"{selector} input[data-field=seal]"
            assert answered_on_card(browser, pending, box, "checked = true") == "200"
        run = wait_for(client, run_id, finished, within_s=90)
        text = output_of(client, run_id)
        listed = questions_of(client, run_id)

    assert run["status"] == "completed", run
    assert "sealed <b>bundle-3</b>" in text  # the tool's own result: it was answered seal: true
    assert listed[0]["content"] == {"seal": True}
    assert listed[0]["decided_by"] == "person:tenant-demo/dev-approver"

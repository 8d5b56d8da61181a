"""A tool's question to a person, over the real API, supervisor, PostgreSQL and server-everything: its
``simulate-research-query`` run as a task with ``ambiguous`` asks which interpretation of the topic is meant
(an elicitation on ``tasks/result``). The question waits in the inbox while the run's other branch goes on; a
person answers (or declines) through the API or the CLI; the answer reaches the tool, whose report names it.
What the tool was sent is read at the wire (a proxy in front of the server), never in raydag's records."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth, raydag_cli
from tests.integration.headless import Chromium
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_mcp_tasks import RESEARCH, TASK_TOOLS, CountingProxy, proxied  # noqa: F401
from tests.integration.test_operations import finished, problem, wait_for
from tests.integration.test_viewer import view_url
from tests.integration.test_viewer_decisions import decide_with, open_at, press, shown, text_of
from tests.integration.toolset_servers import everything_toolsets

APPROVER_KEY = "dev-key-approver"
"""A development approver's key: every scope the toolsets declare (so it reads the run) and ``runs:answer``."""
CHOICES = {"technical", "historical", "current"}
"""What server-everything's question offers (its schema's ``oneOf``)."""


@pytest.fixture
def served(
    ray_cluster: None,
    scratch_dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,  # noqa: F811
    proxied: tuple[str, CountingProxy],  # noqa: F811
) -> tuple[str, CountingProxy, str]:
    """An API of the test's own over server-everything (through the counting proxy): its URL, the proxy, and
    the name of its supervisor's actor."""
    url, proxy = proxied
    config = api_config(
        scratch_dsn, tool_server.url, token_key, toolsets=everything_toolsets(url, TASK_TOOLS)
    )
    [supervisor] = config.supervisor_names
    return serve_api(config), proxy, supervisor


@pytest.fixture
def api(served: tuple[str, CountingProxy, str]) -> tuple[str, CountingProxy]:
    base, proxy, _ = served
    return base, proxy


def ambiguous_run(client: httpx.Client, topic: str) -> str:
    """A run of the ambiguous research beside an independent echo node."""
    plan = {
        "nodes": [
            {"id": "research", "tool": RESEARCH, "args": {"topic": topic, "ambiguous": True}},
            {"id": "beside", "tool": "echo", "args": {"message": "the other branch"}},
        ]
    }
    created = client.post("/runs", json={"plan": plan, "stage": "investigate"}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    return run_id


def asked(client: httpx.Client, run_id: str, within_s: float = 60) -> dict[str, Any]:
    """The run's tool question, once the inbox lists it."""
    deadline = time.monotonic() + within_s
    while True:
        page = client.get(
            "/decisions", params={"run_id": run_id, "kind": "tool_question"}, headers=auth(DEMO_KEY)
        )
        assert page.status_code == 200, page.text
        if page.json()["items"]:
            [item] = page.json()["items"]
            return dict(item)
        assert time.monotonic() < deadline, f"no tool question in run {run_id}"
        time.sleep(0.2)


def node(client: httpx.Client, run_id: str, node_id: str) -> dict[str, Any]:
    nodes = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()
    [found] = [each for each in nodes if each["node_id"] == node_id]
    return dict(found)


def report(client: httpx.Client, run_id: str) -> str:
    """The research node's output: the report the tool wrote."""
    [succeeded] = [
        event
        for event in events_of(client, run_id)
        if event["kind"] == "node_succeeded" and event["node_id"] == "research"
    ]
    return str(succeeded["output"]["content"][0]["text"])


def test_a_tools_question_waits_in_the_inbox_on_its_branch_and_the_persons_answer_reaches_the_tool(
    api: tuple[str, CountingProxy],
) -> None:
    base, proxy = api
    topic = f"rust {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        before = proxy.tools[RESEARCH]
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        assert item["server"] == "everything"
        assert item["tool"] == RESEARCH
        assert item["node_id"] == "research"
        assert topic in item["message"]  # the server's own words
        assert set(item["requested_schema"]["properties"]) == {"interpretation"}
        base_route = f"/runs/{run_id}/tool-questions/{item['question_id']}"
        assert item["decide"] == {"answer": f"{base_route}/answer", "decline": f"{base_route}/decline"}
        assert item["decidable"] is False  # the run's own key holds no runs:answer
        assert node(client, run_id, "beside")["status"] == "succeeded"  # the other branch went on
        assert node(client, run_id, "research")["task"]["status"] == "input_required"

        answer = {"content": {"interpretation": "historical"}}
        assert problem(client.post(f"{base_route}/answer", json=answer, headers=auth(DEMO_KEY))) == (
            403,
            "scope-missing",
        )
        wrong = {"content": {"interpretation": "astrological"}}
        refused = client.post(f"{base_route}/answer", json=wrong, headers=auth(APPROVER_KEY))
        assert problem(refused) == (422, "tool-answer-invalid")
        assert "interpretation" in refused.json()["detail"]
        unknown = f"/runs/{run_id}/tool-questions/{uuid.uuid4()}/answer"
        assert problem(client.post(unknown, json=answer, headers=auth(APPROVER_KEY))) == (
            404,
            "tool-question-not-found",
        )
        answered = client.post(f"{base_route}/answer", json=answer, headers=auth(APPROVER_KEY))
        assert answered.status_code == 200, answered.text
        assert answered.json()["state"] == "answered"
        assert answered.json()["decided_by"] == "person:tenant-demo/dev-approver"
        again = client.post(f"{base_route}/decline", headers=auth(APPROVER_KEY))
        assert problem(again) == (409, "tool-question-decided")

        run = wait_for(client, run_id, finished, within_s=90)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()
        text = report(client, run_id)

    assert run["status"] == "completed", run
    assert f"# Research Report: {topic} (historical)" in text  # the tool's own output names the answer
    assert proxy.tools[RESEARCH] == before + 1  # one call of the tool: its question did not start another
    assert [question["state"] for question in listed] == ["answered"]
    assert listed[0]["content"] == {"interpretation": "historical"}


def test_a_declined_question_tells_the_tool_which_goes_on_as_it_decides(
    api: tuple[str, CountingProxy],
) -> None:
    base, _ = api
    topic = f"declined {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        declined = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/decline", headers=auth(APPROVER_KEY)
        )
        assert declined.status_code == 200, declined.text
        assert (declined.json()["state"], declined.json()["content"]) == ("declined", None)
        run = wait_for(client, run_id, finished, within_s=90)
        text = report(client, run_id)

    assert run["status"] == "completed", run
    assert f"# Research Report: {topic}" in text
    assert not any(f"({choice})" in text for choice in CHOICES)  # no interpretation was given


def test_a_tools_question_is_answered_from_the_cli_with_json_checked_against_its_schema(
    api: tuple[str, CountingProxy], tmp_path: Any
) -> None:
    base, _ = api
    topic = f"cli {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        inbox = raydag_cli("inbox", url=base, key=APPROVER_KEY)
        assert inbox.returncode == 0, inbox.stderr
        assert item["question_id"] in inbox.stdout
        assert RESEARCH in inbox.stdout
        quoted = (run_id, item["question_id"])
        wrong = raydag_cli(
            "questions",
            "answer-tool",
            *quoted,
            "--content",
            json.dumps({"interpretation": 3}),
            url=base,
            key=APPROVER_KEY,
        )
        assert wrong.returncode == 2, wrong.stdout
        assert "interpretation" in wrong.stderr
        assert "Traceback" not in wrong.stderr
        right = raydag_cli(
            "questions",
            "answer-tool",
            *quoted,
            "--content",
            json.dumps({"interpretation": "current"}),
            url=base,
            key=APPROVER_KEY,
        )
        assert right.returncode == 0, right.stderr
        run = wait_for(client, run_id, finished, within_s=90)
        text = report(client, run_id)

    assert run["status"] == "completed", run
    assert f"# Research Report: {topic} (current)" in text


def test_a_run_cancelled_while_its_tool_asks_expires_the_question_and_cancels_the_task(
    api: tuple[str, CountingProxy],
) -> None:
    base, proxy = api
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = ambiguous_run(client, f"cancelled {uuid.uuid4().hex[:6]}")
        item = asked(client, run_id)
        before = proxy.methods["tasks/cancel"]
        assert client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY)).status_code in (200, 202)
        run = wait_for(client, run_id, finished)
        deadline = time.monotonic() + 15
        while proxy.methods["tasks/cancel"] == before and time.monotonic() < deadline:
            time.sleep(0.1)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()
        late = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/answer",
            json={"content": {"interpretation": "technical"}},
            headers=auth(APPROVER_KEY),
        )

    assert run["status"] == "cancelled", run
    assert proxy.methods["tasks/cancel"] == before + 1  # counted at the wire
    assert [question["state"] for question in listed] == ["expired"]
    assert problem(late) == (409, "tool-question-expired")


def test_a_supervisor_killed_while_a_tools_question_waits_resumes_waiting_on_the_same_question(
    served: tuple[str, CountingProxy, str],
) -> None:
    """The question is in the run's log and its row: the supervisor Ray restarts recovers the run, waits on the
    same row, and sends the answer given after the crash to the same task. The tool is called once."""
    import ray

    from actors.supervisor import NAMESPACE

    base, proxy, supervisor = served
    topic = f"crash {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        before = proxy.tools[RESEARCH]
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        ray.kill(ray.get_actor(supervisor, namespace=NAMESPACE), no_restart=False)
        deadline = time.monotonic() + 60
        while not any(event["kind"] == "run_recovered" for event in events_of(client, run_id)):
            assert time.monotonic() < deadline, "the run was not recovered"
            time.sleep(0.2)
        assert asked(client, run_id)["question_id"] == item["question_id"]  # the same question still waits
        answered = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/answer",
            json={"content": {"interpretation": "technical"}},
            headers=auth(APPROVER_KEY),
        )
        assert answered.status_code == 200, answered.text
        run = wait_for(client, run_id, finished, within_s=90)
        text = report(client, run_id)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()

    assert run["status"] == "completed", run
    assert f"# Research Report: {topic} (technical)" in text
    assert proxy.tools[RESEARCH] == before + 1  # the recovered run followed the same task: one call
    assert [question["state"] for question in listed] == ["answered"]


# ---------------------------------------------------------------- the 2026-07-28 form, against caseops

EXPORT = "caseops_export_evidence"


@pytest.fixture
def caseops_api(
    ray_cluster: None,
    scratch_dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,  # noqa: F811
) -> str:
    """An API of the test's own over the shipped toolsets: caseops, pinned to 2026-07-28, whose export runs as a
    task of the ``io.modelcontextprotocol/tasks`` extension and, with ``confirm``, asks for the seal."""
    return str(serve_api(api_config(scratch_dsn, tool_server.url, token_key)))


def confirmed_export_run(client: httpx.Client, case_id: str = "C-102") -> str:
    """A run of an export that asks for confirmation, beside an independent read of the case."""
    plan = {
        "nodes": [
            {"id": "export", "tool": EXPORT, "args": {"case_id": case_id, "confirm": True}},
            {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": case_id}},
        ]
    }
    body = {"plan": plan, "resource": {"case_id": case_id}}
    created = client.post("/runs", json=body, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    run_id: str = created.json()["run_id"]
    return run_id


async def caseops_task(dsn: str, task_id: str) -> dict[str, Any]:
    """The export's task as caseops' own table records it, once its work stopped."""
    connection = await asyncpg.connect(dsn)
    try:
        for _ in range(600):
            row = await connection.fetchrow("SELECT * FROM caseops_tasks WHERE task_id = $1", task_id)
            if row is not None and row["stopped_at"] is not None:
                exports = await connection.fetchval(
                    "SELECT count(*) FROM evidence_exports WHERE export_id = $1", task_id
                )
                return {**dict(row), "exports": exports}
            await asyncio.sleep(0.05)
    finally:
        await connection.close()
    raise AssertionError(f"the work of {task_id} never stopped")


@pytest.mark.parametrize("decision", ["answer", "decline"])
def test_a_question_in_the_2026_07_28_form_is_put_to_a_person_and_the_answer_reaches_the_server(
    caseops_api: str, dsn: str, decision: str
) -> None:
    """caseops' export with ``confirm`` turns ``input_required`` and asks for the seal in ``inputRequests``
    (``tasks/get``); the question waits in the inbox while the other branch goes on; the person's answer goes
    back in ``tasks/update``. A yes seals the bundle; a no fails the node with the tool's own code. Counted in
    caseops' own tables: one task, the answer it was given, one bundle or none."""
    with httpx.Client(base_url=caseops_api, timeout=30) as client:
        run_id = confirmed_export_run(client)
        item = asked(client, run_id)
        assert (item["server"], item["tool"], item["node_id"]) == ("caseops", EXPORT, "export")
        assert "C-102" in item["message"]  # the server's own words
        assert set(item["requested_schema"]["properties"]) == {"seal"}
        assert node(client, run_id, "case")["status"] == "succeeded"  # the other branch went on
        task = node(client, run_id, "export")["task"]
        assert task["status"] == "input_required"
        route = f"/runs/{run_id}/tool-questions/{item['question_id']}"
        wrong = client.post(f"{route}/answer", json={"content": {"seal": "yes"}}, headers=auth(APPROVER_KEY))
        assert problem(wrong) == (422, "tool-answer-invalid")
        if decision == "answer":
            decided = client.post(
                f"{route}/answer", json={"content": {"seal": True}}, headers=auth(APPROVER_KEY)
            )
        else:
            decided = client.post(f"{route}/decline", headers=auth(APPROVER_KEY))
        assert decided.status_code == 200, decided.text
        run = wait_for(client, run_id, finished, within_s=90)
        exported = node(client, run_id, "export")
    row = asyncio.run(caseops_task(dsn, task["task_id"]))

    sent = {"action": "accept", "content": {"seal": True}} if decision == "answer" else {"action": "decline"}
    assert json.loads(row["input_responses"]) == {"seal": sent}  # what the server was told, in its own table
    if decision == "answer":
        assert run["status"] == "completed", run
        assert exported["status"] == "succeeded"
        assert (row["status"], row["exports"]) == ("completed", 1)
    else:
        assert exported["status"] == "failed"
        assert exported["error"]["code"] == "EXPORT_NOT_CONFIRMED"  # the tool's own code: caseops decided
        assert (row["status"], row["exports"]) == ("failed", 0)


def events_of(client: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    answer = client.get(f"/runs/{run_id}/events", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()
    return events


@contextmanager
def question_card(
    base: str, run_id: str, item: dict[str, Any], tmp_path: Path
) -> Iterator[tuple[Any, str, str]]:
    """The run viewer in headless Chromium, open at the card of the tool's question ``item``, whose message is
    checked to be the server's words, shown as text (markup in them never parsed): the browser, the card's
    pending id and its selector."""
    pending = f"tool_question:{item['question_id']}"
    selector = f'[data-pending="{pending}"]'
    with Chromium(tmp_path / "chromium") as browser:
        open_at(browser, view_url(base, run_id, DEMO_KEY), pending)
        assert text_of(browser, f"{selector} blockquote.tool-says") == item["message"]
        assert not shown(browser, f"{selector} blockquote.tool-says b")
        yield browser, pending, selector


def answered_on_card(browser: Any, pending: str, field: str, setting: str) -> str:
    """Decide as the approver, set the card's ``field`` (a selector) with ``setting`` (``value = ...``,
    ``checked = true``) as a person would, and press Answer: the status the API answered the page."""
    decide_with(browser, APPROVER_KEY)
    browser.evaluate(
        f"(() => {{ const f = document.querySelector('{field}'); f.{setting};"
        " f.dispatchEvent(new Event('change')); })()"
    )
    return str(press(browser, pending, "answer", decisions=1))


def test_a_tools_question_is_answered_from_the_run_viewer_through_a_form_built_from_its_schema(
    api: tuple[str, CountingProxy], tmp_path: Path
) -> None:
    """In Debian's headless Chromium: the page shows the server's words as text, a choice for each option the
    schema offers, and posts the chosen one as the answer's content with the approver's key."""
    base, _ = api
    topic = f"viewer <b>{uuid.uuid4().hex[:6]}</b>"  # markup in the server's words stays text
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        with question_card(base, run_id, item, tmp_path) as (browser, pending, selector):
            choices = browser.evaluate(
                f"[...document.querySelectorAll('{selector} select[data-field=interpretation] option')]"
                ".map((o) => o.value)"
            )
            assert choices == ["", "technical", "historical", "current"]
            chosen = f"{selector} select[data-field=interpretation]"
            assert answered_on_card(browser, pending, chosen, "value = 'historical'") == "200"
        run = wait_for(client, run_id, finished, within_s=90)
        text = report(client, run_id)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()

    assert run["status"] == "completed", run
    assert "(historical)" in text
    assert listed[0]["decided_by"] == "person:tenant-demo/dev-approver"
    assert listed[0]["content"] == {"interpretation": "historical"}


def test_a_question_the_tool_stopped_waiting_for_is_withdrawn_and_takes_no_answer(
    api: tuple[str, CountingProxy],
) -> None:
    """server-everything waits 60 s for the answer, then goes on with a default: the run notices at its next
    look, withdraws the question (it leaves the inbox), and the task completes without an answer."""
    base, proxy = api
    topic = f"unanswered {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        before = proxy.tools[RESEARCH]
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        run = wait_for(client, run_id, finished, within_s=150)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()
        late = client.post(
            f"/runs/{run_id}/tool-questions/{item['question_id']}/answer",
            json={"content": {"interpretation": "technical"}},
            headers=auth(APPROVER_KEY),
        )
        pending = client.get(
            "/decisions", params={"run_id": run_id, "kind": "tool_question"}, headers=auth(DEMO_KEY)
        ).json()
        text = report(client, run_id)

    assert run["status"] == "completed", run
    assert [question["state"] for question in listed] == ["withdrawn"]
    assert listed[0]["decided_by"].startswith("supervisor:")
    assert problem(late) == (409, "tool-question-withdrawn")
    assert pending["items"] == []
    assert f"# Research Report: {topic}" in text
    assert proxy.tools[RESEARCH] == before + 1

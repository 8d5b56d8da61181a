"""The 2026-07-28 form of Tasks (the ``io.modelcontextprotocol/tasks`` extension) over stdio: a stdio server of
that era (``extension_task_server.py``: caseops speaks the extension over Streamable HTTP only) runs its tool as
a task of its process; raydag records the task before it waits on it, follows its stages, reads the result
``tasks/get`` inlines; its question goes to a person through the API and the answer back in ``tasks/update``; a
cancelled run sends ``tasks/cancel``; the process killed mid-task loses it, and the read is made again.
Counted in the server's own log, never in raydag's records. The set-up is
``test_mcp_tasks_stdio``'s (its ``stdio_api`` serving this server instead)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.calls.call import MODERN_PROTOCOL, STDIO_SESSION
from actors.store.runs import RunStore
from actors.toolsets.config import Toolsets, parse_toolsets
from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth, supervisor_for
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_durability import finished, until
from tests.integration.test_mcp_tasks import PRINCIPAL, report_of, task_events
from tests.integration.test_mcp_tasks_stdio import name, stdio_api, wire  # noqa: F401 - fixtures
from tests.integration.test_operations import finished as finished_run
from tests.integration.test_operations import problem, wait_for
from tests.integration.test_tool_questions import APPROVER_KEY, asked, events_of

SERVER = Path(__file__).with_name("extension_task_server.py")
EXPORT = "slow_export"


def extension_stdio(log: Path, stage_s: float = 0.4) -> Toolsets:
    """The extension's stdio server, pinned to 2026-07-28, logging what it does to ``log``; each stage of its
    work takes ``stage_s``."""
    text = f"""\
servers:
  - name: exports
    transport: stdio
    command: {sys.executable}
    args: ["{SERVER}", "{log}"]
    env: {{EXT_TASK_STAGE_S: "{stage_s}"}}
    protocol: "2026-07-28"
    timeouts: {{connect_s: 30, call_s: 30}}
    tools:
      {EXPORT}: {{scope: demo:read, risk: read_only, task: true}}
"""
    return parse_toolsets(text, "exports-stdio.yaml", {})


@pytest.fixture
def stdio_toolsets(wire: Path) -> Toolsets:  # noqa: F811 - ``stdio_api`` serves this server
    return extension_stdio(wire)


def logged(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def seen(path: Path) -> Counter[str]:
    """What the server did: each request's method, and each event of its work."""
    return Counter(
        entry["method"] if entry["event"] == "request" else entry["event"] for entry in logged(path)
    )


def export(label: str, *, confirm: bool = False) -> dict[str, Any]:
    return {"nodes": [{"id": "export", "tool": EXPORT, "args": {"label": label, "confirm": confirm}}]}


async def submitted(supervisor: Any, label: str) -> str:
    from actors.run.submission import RunRequest, Submission

    answer = await supervisor.submit.remote(
        RunRequest(
            principal=PRINCIPAL, resource={}, plan=export(label), planner="outputs", stage="investigate"
        )
    )
    assert answer.outcome is Submission.CREATED, answer
    return str(answer.run_id)


@pytest.fixture
def exports(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    name: str,  # noqa: F811
    wire: Path,  # noqa: F811
) -> Iterator[Callable[[float], Any]]:
    """Starts a supervisor over the extension's stdio server (each stage of its work taking the seconds it is
    given), logging to ``wire``; kills it afterwards."""
    import ray

    started: list[Any] = []

    def start(stage_s: float) -> Any:
        toolsets = extension_stdio(wire, stage_s)
        started.append(supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets))
        return started[-1]

    yield start
    for supervisor in started:
        ray.kill(supervisor)


async def test_a_stdio_servers_task_runs_in_the_extensions_form_recorded_before_it_is_awaited(
    store: RunStore,
    wire: Path,  # noqa: F811
    exports: Callable[[float], Any],
) -> None:
    supervisor, log = exports(0.4), wire  # the server logs what it does
    label = f"bundle-{uuid.uuid4().hex[:6]}"
    offered = await supervisor.contracts.remote()
    run_id = await submitted(supervisor, label)
    events = await until(store, run_id, finished, timeout_s=90)

    assert offered[EXPORT].task is True
    assert events[-1].status == "completed", events[-1]
    assert report_of(events) == f"exported {label} to archive"  # the result tasks/get inlined
    updates = task_events(events)
    assert len({update["task_id"] for update in updates}) == 1
    assert updates[0]["status"] == "working"  # recorded as the server created it, before it was awaited
    assert updates[0]["protocol"] == MODERN_PROTOCOL
    assert updates[0]["session"].startswith(STDIO_SESSION)  # the process incarnation it lives in
    assert {"gathering the documents", "sealing the bundle"} <= {update["message"] for update in updates}
    done = seen(log)
    assert (done["tools/call"], done["started"], done["completed"]) == (1, 1, 1)
    assert done["tasks/get"] >= 3
    assert done["tasks/result"] == 0  # the extension has none: tasks/get inlines the result


def test_a_stdio_tasks_question_in_the_extensions_form_is_answered_through_the_api_and_completes_it(
    stdio_api: tuple[str, Path],  # noqa: F811
) -> None:
    base, log = stdio_api
    label = f"bundle-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        created = client.post(
            "/runs",
            json={"plan": export(label, confirm=True), "stage": "investigate"},
            headers=auth(DEMO_KEY),
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        item = asked(client, run_id)
        assert (item["server"], item["tool"], item["node_id"]) == ("exports", EXPORT, "export")
        assert item["message"] == "Where should the bundle go?"  # the server's own words
        assert set(item["requested_schema"]["properties"]) == {"destination"}
        route = f"/runs/{run_id}/tool-questions/{item['question_id']}/answer"
        wrong = {"content": {"destination": "the moon"}}
        assert problem(client.post(route, json=wrong, headers=auth(APPROVER_KEY))) == (
            422,
            "tool-answer-invalid",
        )
        answered = client.post(route, json={"content": {"destination": "court"}}, headers=auth(APPROVER_KEY))
        assert answered.status_code == 200, answered.text
        run = wait_for(client, run_id, finished_run, within_s=90)
        events = events_of(client, run_id)

    assert run["status"] == "completed", run
    [succeeded] = [event for event in events if event["kind"] == "node_succeeded"]
    assert succeeded["output"]["content"][0]["text"] == f"exported {label} to court"  # the answer reached it
    answers = [entry["answer"] for entry in logged(log) if entry["event"] == "answered"]
    assert answers == [{"action": "accept", "content": {"destination": "court"}}]  # one tasks/update
    assert seen(log)["tools/call"] == 1  # its question did not start another call


async def test_a_cancelled_run_sends_tasks_cancel_to_its_stdio_task_and_the_work_stops(
    store: RunStore,
    wire: Path,  # noqa: F811
    exports: Callable[[float], Any],
) -> None:
    supervisor, log = exports(20), wire  # each stage 20 s: cancelled long before it could end
    run_id = await submitted(supervisor, "cancelled")
    await until(store, run_id, lambda events: len(task_events(events)) >= 1)
    await supervisor.cancel.remote(run_id)
    events = await until(store, run_id, finished)
    for _ in range(100):  # the follower sends it as it is cancelled, beside the run's end
        if seen(log)["stopped"]:
            break
        await asyncio.sleep(0.05)

    assert events[-1].status == "cancelled", events[-1]
    done = seen(log)
    assert (done["tasks/cancel"], done["cancelled"], done["stopped"], done["completed"]) == (1, 1, 1, 0)


async def test_a_stdio_task_in_the_extensions_form_dies_with_its_process_and_the_read_is_made_again(
    store: RunStore,
    wire: Path,  # noqa: F811
    exports: Callable[[float], Any],
) -> None:
    supervisor = exports(2)  # six seconds of work: killed well before it ends
    run_id = await submitted(supervisor, "a server's death")
    await until(store, run_id, lambda events: len(task_events(events)) >= 1)
    [holding] = [entry["pid"] for entry in logged(wire) if entry["event"] == "started"]
    os.kill(holding, signal.SIGKILL)  # the process the task lives in, and so the task
    events = await until(store, run_id, finished, timeout_s=120)

    assert events[-1].status == "completed", events[-1]
    retried = [event for event in events if event.kind == "node_retry_scheduled"]
    assert [event.error.code for event in retried] == [
        "TASK_LOST"
    ]  # lost at once, made again by the retry policy
    assert len({update["session"] for update in task_events(events)}) == 2  # the new task, in the new process
    started = [entry["pid"] for entry in logged(wire) if entry["event"] == "started"]
    assert started[0] == holding
    assert len(started) == 2
    assert started[1] != holding

"""Tasks over stdio: server-everything's ``simulate-research-query`` (``taskSupport: required``) run by a stdio
server, a child process of the caller that started it. Called as a task of that process, its handle naming the
process; its question (``ambiguous``) put to a person through the API and the answer reaching the tool; the
process killed mid-task, the task lost and the read made again as a new task. Counted at the server's wire by a
tap in front of it (``stdio_tap.py``), never in raydag's records."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.calls.call import STDIO_SESSION, ExecutorKind
from actors.store.runs import RunStore
from actors.toolsets.config import Toolsets, parse_toolsets
from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth, supervisor_for
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_durability import finished, until
from tests.integration.test_mcp_tasks import (
    RESEARCH,
    TASK_TOOLS,
    TASK_WRITES,
    report_of,
    submitted,
    task_events,
)
from tests.integration.test_operations import finished as finished_run
from tests.integration.test_operations import problem, wait_for
from tests.integration.test_tool_questions import APPROVER_KEY, ambiguous_run, asked, report
from tests.integration.toolset_servers import EVERYTHING, NODE

TAP = Path(__file__).with_name("stdio_tap.py")


def everything_stdio(wire: Path, tools: str = TASK_TOOLS, read_only: str = RESEARCH) -> Toolsets:
    """server-everything over stdio, behind the tap that logs its wire to ``wire`` (and lists ``read_only`` as
    a tool that only reads)."""
    text = f"""\
servers:
  - name: everything
    transport: stdio
    command: {sys.executable}
    args: ["{TAP}", "{wire}", "{NODE}", "{EVERYTHING}", "stdio"]
    env: {{STDIO_TAP_READ_ONLY: {read_only}}}
    timeouts: {{connect_s: 30, call_s: 30}}
    tools:
{tools}"""
    return parse_toolsets(text, "everything-stdio.yaml", {})


def wire_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counted(path: Path) -> Counter[str]:
    """What reached the server: each method, ``tools/call`` of the research as ``research`` (as a task or not)."""
    seen: Counter[str] = Counter()
    for entry in wire_of(path):
        if entry.get("tool") == RESEARCH:
            seen["research as a task" if entry["task"] else "research"] += 1
        elif "method" in entry:
            seen[str(entry["method"])] += 1
    return seen


def researched_by(path: Path) -> list[int]:
    """The server process each research task was started in (several processes share one log: each caller
    and the supervisor start their own)."""
    return [int(entry["server"]) for entry in wire_of(path) if entry.get("tool") == RESEARCH]


@pytest.fixture
def name() -> str:
    return f"raydag-test-stdio-tasks-{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("executor", [ExecutorKind.CALLERS, ExecutorKind.SUPERVISOR])
async def test_a_stdio_servers_task_tool_runs_as_a_task_of_its_process_and_its_result_is_read_once(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    tmp_path: Path,
    executor: ExecutorKind,
) -> None:
    import ray

    wire = tmp_path / "wire.jsonl"
    callers = {"tool_callers": 2} if executor is ExecutorKind.CALLERS else {}  # two children, one holds it
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_stdio(wire), tool_executor=executor, **callers
    )
    topic = f"stdio {uuid.uuid4().hex[:6]}"
    try:
        offered = await supervisor.contracts.remote()
        run_id = await submitted(supervisor, topic)
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)

    assert offered[RESEARCH].task is True
    assert events[-1].status == "completed", events[-1]
    assert f"# Research Report: {topic}" in report_of(events)
    updates = task_events(events)
    assert len({update["task_id"] for update in updates}) == 1  # one task, followed to its end
    assert updates[0]["status"] == "working"  # recorded as the server created it, before it was awaited
    assert updates[0]["session"].startswith(STDIO_SESSION)  # the process incarnation it lives in
    if executor is ExecutorKind.CALLERS:  # its follows all go to the caller whose child runs it
        assert {update["holder"] for update in updates} < {f"{name}-tool-caller-{i}" for i in (0, 1)}
    assert len({update["message"] for update in updates}) >= 3  # its stages, as they were reported
    seen = counted(wire)
    assert (seen["research as a task"], seen["research"], seen["tasks/result"]) == (1, 0, 1)


async def test_a_stdio_server_killed_mid_task_loses_the_task_and_the_read_is_made_again_as_a_new_task(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    tmp_path: Path,
) -> None:
    import ray

    wire = tmp_path / "wire.jsonl"
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=everything_stdio(wire))
    topic = f"a server's death {uuid.uuid4().hex[:6]}"
    try:
        run_id = await submitted(supervisor, topic)
        await until(store, run_id, lambda events: len(task_events(events)) >= 1)
        [holding] = researched_by(wire)
        os.kill(holding, signal.SIGKILL)  # the process the task lives in, and so the task
        events = await until(store, run_id, finished, timeout_s=120)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    assert f"# Research Report: {topic}" in report_of(events)
    retried = [event for event in events if event.kind == "node_retry_scheduled"]
    assert [event.error.code for event in retried] == ["TASK_LOST"]  # a read: made again, by the retry policy
    sessions = {update["session"] for update in task_events(events)}
    assert len(sessions) == 2  # the second task lives in the process that replaced the dead one
    # The tool was called again, as a new task, only after the loss, in the process that replaced the dead one.
    [first, second] = researched_by(wire)
    assert (first, second != holding) == (holding, True)


@pytest.fixture
def wire(tmp_path: Path) -> Path:
    """Where the stdio server's wire is logged (by the tap, or by the server itself)."""
    return tmp_path / "wire.jsonl"


@pytest.fixture
def stdio_toolsets(wire: Path) -> Toolsets:
    """What ``stdio_api`` serves: server-everything over stdio, behind the tap (a module overrides it to serve
    another stdio server)."""
    return everything_stdio(wire)


@pytest.fixture
def stdio_api(
    ray_cluster: None,
    scratch_dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,  # noqa: F811
    wire: Path,
    stdio_toolsets: Toolsets,
) -> tuple[str, Path]:
    """An API of the test's own over a stdio server (``stdio_toolsets``): its URL, and the server's wire log."""
    config = api_config(scratch_dsn, tool_server.url, token_key, toolsets=stdio_toolsets)
    return serve_api(config), wire


def test_a_stdio_tasks_question_waits_in_the_inbox_and_the_persons_answer_reaches_the_tool(
    stdio_api: tuple[str, Path],
) -> None:
    base, wire = stdio_api
    topic = f"rust {uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id = ambiguous_run(client, topic)
        item = asked(client, run_id)
        assert (item["server"], item["tool"], item["node_id"]) == ("everything", RESEARCH, "research")
        assert topic in item["message"]  # the server's own words
        assert set(item["requested_schema"]["properties"]) == {"interpretation"}
        route = f"/runs/{run_id}/tool-questions/{item['question_id']}/answer"
        wrong = {"content": {"interpretation": "astrological"}}
        assert problem(client.post(route, json=wrong, headers=auth(APPROVER_KEY))) == (
            422,
            "tool-answer-invalid",
        )
        answer = {"content": {"interpretation": "historical"}}
        answered = client.post(route, json=answer, headers=auth(APPROVER_KEY))
        assert answered.status_code == 200, answered.text
        run = wait_for(client, run_id, finished_run, within_s=90)
        text = report(client, run_id)
        listed = client.get(f"/runs/{run_id}/tool-questions", headers=auth(DEMO_KEY)).json()

    assert run["status"] == "completed", run
    assert f"# Research Report: {topic} (historical)" in text  # the tool's own output names the answer
    assert [question["state"] for question in listed] == ["answered"]
    assert counted(wire)["research as a task"] == 1  # its question did not start another call


async def test_a_write_whose_stdio_task_dies_with_its_process_is_unknown_never_executed_again(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    tmp_path: Path,
) -> None:
    """A write run as a task of a stdio server, its process killed mid-task: the task is lost, and with it what
    the write did; its operation becomes ``unknown`` (for a reconciling read or a person), and the tool is
    not called again."""
    import ray

    from actors.store.database import create_pool
    from actors.store.operations import OperationStore

    wire = tmp_path / "wire.jsonl"
    toolsets = everything_stdio(wire, TASK_WRITES)
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets)
    pool = await create_pool(dsn, max_size=1)
    try:
        run_id = await submitted(supervisor, f"a lost write {uuid.uuid4().hex[:6]}", stage="act")
        events = await until(store, run_id, lambda events: len(task_events(events)) >= 1)
        [holding] = researched_by(wire)
        os.kill(holding, signal.SIGKILL)
        deadline = time.monotonic() + 120
        while True:
            [operation] = await OperationStore(pool).of_run(run_id)
            if operation.state.value not in {"approved", "executing"}:
                break
            assert time.monotonic() < deadline, operation
            await asyncio.sleep(0.2)
    finally:
        await pool.close()
        ray.kill(supervisor)

    assert operation.state.value == "unknown"
    assert operation.task is not None
    assert operation.task["task_id"] == task_events(events)[0]["task_id"]
    assert researched_by(wire) == [holding]  # executed once, never again after the loss

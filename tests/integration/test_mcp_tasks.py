"""A tool that runs as an MCP task (server-everything's ``simulate-research-query``, ``taskSupport:
required``): called as a task, its handle and progress in the run's log, its result read once it ended; a
caller or a supervisor killed mid-task, the run follows the same task and the tool is called once; a cancelled
run cancels its task. Counted at the wire, by a proxy in front of the server, never in raydag's records."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from actors.calls.call import ExecutorKind
from actors.launch.background_server import BackgroundServer
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE
from dag.policy import Principal
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_durability import finished, kinds, until
from tests.integration.toolset_servers import everything_server, everything_toolsets

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"demo:read", "demo:write"}))
RESEARCH = "simulate-research-query"
TASK_TOOLS = f"""\
      {RESEARCH}: {{scope: demo:read, risk: read_only}}
      echo: {{scope: demo:read, risk: read_only}}
"""
TASK_WRITES = f"""\
      {RESEARCH}:
        scope: demo:write
        risk: reversible_write
        stages: [act]
        operation: {{approval: policy}}
"""
"""The research task as server-everything's hints have it: a write (``readOnlyHint: false``), run through the
operation ledger."""
FORWARDED = ("content-type", "accept", "mcp-session-id", "mcp-protocol-version", "authorization")


@dataclass
class CountingProxy:
    """Forwards every request to ``upstream`` and counts the JSON-RPC methods (and tools called) it saw. An
    answer is relayed as it streams (a server's request arrives mid-stream), but a listing's, which is read
    whole to be rewritten."""

    upstream: str
    methods: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    read_only: tuple[str, ...] = (RESEARCH,)
    """The tools whose listing is made to say they only read (``_read_only``)."""
    answers: list[dict[str, Any]] = field(default_factory=list)
    """Each answer the client sent to a request of the server's (an elicitation's result), as it arrived."""

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        if body:
            message = json.loads(body)
            self.methods[message.get("method")] += 1
            if "method" not in message and isinstance(message.get("result"), dict):
                self.answers.append(message["result"])
            if message.get("method") == "tools/call":
                self.tools[message["params"]["name"]] += 1
        headers = {name: value for name, value in request.headers.items() if name in FORWARDED}
        if request.method == "POST" and body and json.loads(body).get("method") == "tools/list":
            async with httpx.AsyncClient(timeout=60) as http:
                answer = await http.post(self.upstream, content=body, headers=headers)
            kept = {name: value for name, value in answer.headers.items() if name in FORWARDED}
            return Response(
                _read_only(answer.content, self.read_only), status_code=answer.status_code, headers=kept
            )
        http = httpx.AsyncClient(timeout=None)
        upstream = http.build_request(request.method, self.upstream, content=body, headers=headers)
        answer = await http.send(upstream, stream=True)
        kept = {name: value for name, value in answer.headers.items() if name in FORWARDED}

        async def relayed() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                return  # the server ended a stream (a GET's, on a session's end): so does the proxy
            finally:
                await answer.aclose()
                await http.aclose()

        return StreamingResponse(relayed(), status_code=answer.status_code, headers=kept)


def _read_only(body: bytes, read_only: tuple[str, ...] = (RESEARCH,)) -> bytes:
    """``body`` with the research task listed as read-only: server-everything marks it ``readOnlyHint:
    false``, and raydag believes a server that says its tool writes (a write runs through the operation
    ledger, which does not call tasks yet). What the task does is a simulation that writes nothing."""
    lines = []
    for line in body.decode().splitlines():
        payload = line[5:].strip() if line.startswith("data:") else line.strip()
        message = json.loads(payload) if payload.startswith("{") else None
        tools = ((message or {}).get("result") or {}).get("tools")
        if isinstance(tools, list):
            for tool in tools:
                if tool.get("name") in read_only:
                    tool.setdefault("annotations", {})["readOnlyHint"] = True
            line = ("data: " if line.startswith("data:") else "") + json.dumps(message)
        lines.append(line)
    return ("\n".join(lines) + "\n").encode()


@contextmanager
def everything_proxied(
    log: Path, read_only: tuple[str, ...] = (RESEARCH,)
) -> Iterator[tuple[str, CountingProxy]]:
    """server-everything over Streamable HTTP behind a ``CountingProxy``: the proxy's URL, and the proxy."""
    with everything_server(log) as server:
        proxy = CountingProxy(server.url, read_only=read_only)
        app = Starlette(routes=[Route("/mcp", proxy.handle, methods=["GET", "POST", "DELETE"])])
        http = BackgroundServer(host="127.0.0.1").start(app)
        try:
            yield http.url + "/mcp", proxy
        finally:
            http.stop()


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, CountingProxy]]:
    with everything_proxied(tmp_path_factory.mktemp("everything") / "server.log") as served:
        yield served


@pytest.fixture
def name() -> str:
    return f"raydag-test-tasks-{uuid.uuid4().hex[:6]}"


def research(topic: str) -> dict[str, Any]:
    return {"nodes": [{"id": "research", "tool": RESEARCH, "args": {"topic": topic}}]}


def task_events(events: list[Any]) -> list[dict[str, Any]]:
    return [event.task for event in events if event.kind == "node_task_updated"]


async def submitted(supervisor: Any, topic: str, stage: str = "investigate") -> str:
    answer = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={}, plan=research(topic), planner="outputs", stage=stage)
    )
    assert answer.outcome is Submission.CREATED, answer
    return str(answer.run_id)


async def task_recorded(supervisor: Any, store: RunStore, topic: str, stage: str = "investigate") -> str:
    """A research run, once its task's handle is in its log."""
    run_id = await submitted(supervisor, topic, stage)
    await until(store, run_id, lambda events: len(task_events(events)) >= 1)
    return run_id


def report_of(events: list[Any]) -> str:
    [succeeded] = [event for event in events if event.kind == "node_succeeded"]
    return str(succeeded.output["content"][0]["text"])


@pytest.mark.parametrize("executor", [ExecutorKind.CALLERS, ExecutorKind.SUPERVISOR])
async def test_a_task_tool_is_called_as_a_task_its_progress_recorded_and_its_result_read_once(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
    executor: ExecutorKind,
) -> None:
    import ray

    url, proxy = proxied
    toolsets = everything_toolsets(url, TASK_TOOLS)
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets, tool_executor=executor)
    topic = f"tasks {uuid.uuid4().hex[:6]}"
    try:
        offered = await supervisor.contracts.remote()
        before = proxy.tools[RESEARCH], proxy.methods["tasks/result"]
        run_id = await submitted(supervisor, topic)
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)

    assert offered[RESEARCH].task is True
    assert offered["echo"].task is False  # taskSupport: forbidden, called as before
    assert events[-1].status == "completed", events[-1]
    assert f"# Research Report: {topic}" in report_of(events)
    updates = task_events(events)
    assert len({update["task_id"] for update in updates}) == 1  # one task, followed to its end
    assert updates[0]["status"] == "working"  # recorded as the server created it, before it was awaited
    assert len({update["message"] for update in updates}) >= 3  # its stages, as they were reported
    # Counted at the wire: one call of the tool, one read of its result.
    assert (proxy.tools[RESEARCH], proxy.methods["tasks/result"]) == (before[0] + 1, before[1] + 1)


async def test_a_caller_killed_mid_task_is_replaced_and_the_run_follows_the_same_task(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
) -> None:
    import ray

    url, proxy = proxied
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_toolsets(url, TASK_TOOLS), tool_callers=1
    )
    try:
        before = proxy.tools[RESEARCH]
        run_id = await task_recorded(supervisor, store, "a caller's death")
        ray.kill(ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE), no_restart=False)
        events = await until(store, run_id, finished, timeout_s=90)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    assert "# Research Report: a caller's death" in report_of(events)
    assert len({update["task_id"] for update in task_events(events)}) == 1
    assert kinds(events)["node_dispatched"] == 1  # never dispatched again
    assert proxy.tools[RESEARCH] == before + 1  # the tool was called once, at the server


async def test_a_supervisor_killed_mid_task_recovers_the_run_by_following_the_recorded_task(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
) -> None:
    import ray

    url, proxy = proxied
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_toolsets(url, TASK_TOOLS)
    )
    try:
        before = proxy.tools[RESEARCH]
        run_id = await task_recorded(supervisor, store, "a supervisor's death")
        ray.kill(supervisor, no_restart=False)  # Ray restarts it; it reclaims and resumes the run
        events = await until(store, run_id, finished, timeout_s=120)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    assert kinds(events)["run_recovered"] == 1
    assert "# Research Report: a supervisor's death" in report_of(events)
    assert len({update["task_id"] for update in task_events(events)}) == 1
    assert proxy.tools[RESEARCH] == before + 1


async def test_a_supervisor_that_hands_over_mid_task_leaves_the_task_running_for_its_successor(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
) -> None:
    """A drain (a SIGTERM, a redeploy) hands the run over at once, without waiting for the task and without
    stopping it; the supervisor that takes the run on follows the same task."""
    import ray

    url, proxy = proxied
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_toolsets(url, TASK_TOOLS)
    )
    try:
        before = proxy.tools[RESEARCH], proxy.methods["tasks/cancel"]
        run_id = await task_recorded(supervisor, store, "a handover")
        drained = await supervisor.drain.remote(30.0)
        ray.kill(supervisor, no_restart=False)  # and the process goes; Ray starts another
        events = await until(store, run_id, finished, timeout_s=120)
    finally:
        ray.kill(supervisor)

    assert (drained.handed_over, drained.abandoned) == ((run_id,), ())  # handed over, nothing cut short
    assert events[-1].status == "completed", events[-1]
    assert "# Research Report: a handover" in report_of(events)
    assert len({update["task_id"] for update in task_events(events)}) == 1
    assert (proxy.tools[RESEARCH], proxy.methods["tasks/cancel"]) == (before[0] + 1, before[1])


async def test_a_cancelled_run_cancels_its_task_at_the_server(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
) -> None:
    import ray

    url, proxy = proxied
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_toolsets(url, TASK_TOOLS)
    )
    try:
        before = proxy.methods["tasks/cancel"]
        run_id = await task_recorded(supervisor, store, "cancelled")
        await supervisor.cancel.remote(run_id)
        events = await until(store, run_id, finished)
        for _ in range(100):  # the follower sends it as it is cancelled, beside the run's end
            if proxy.methods["tasks/cancel"] > before:
                break
            await asyncio.sleep(0.05)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "cancelled", events[-1]
    assert proxy.methods["tasks/cancel"] == before + 1


@pytest.mark.parametrize(
    "stopped", ["as-is", "killed", "drained"], ids=["as-is", "supervisor-killed-mid-task", "drained-mid-task"]
)
async def test_a_write_that_runs_as_a_task_executes_once_through_its_operation_even_across_a_crash(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    proxied: tuple[str, CountingProxy],
    stopped: str,
) -> None:
    """The operation records the task before anyone waits on it; a supervisor that finds it executing after a
    crash follows that task to the operation's outcome, instead of calling it unknown. A drain leaves it
    executing (never unknown, even for a moment), its task running for the supervisor that takes over."""
    import ray

    from actors.store.database import create_pool
    from actors.store.operations import OperationStore

    url, proxy = proxied
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=everything_toolsets(url, TASK_WRITES)
    )
    topic = f"a write {uuid.uuid4().hex[:6]}"
    try:
        before = proxy.tools[RESEARCH]
        run_id = await task_recorded(supervisor, store, topic, stage="act")
        if stopped == "drained":
            await supervisor.drain.remote(30.0)
        if stopped != "as-is":
            ray.kill(supervisor, no_restart=False)  # Ray restarts it; it reclaims and resumes the run
        events = await until(store, run_id, finished, timeout_s=120)
    finally:
        ray.kill(supervisor)

    assert events[-1].status == "completed", events[-1]
    assert kinds(events)["run_recovered"] == int(stopped != "as-is")
    assert f"# Research Report: {topic}" in report_of(events)
    assert proxy.tools[RESEARCH] == before + 1  # executed once, at the server
    pool = await create_pool(dsn, max_size=1)
    try:
        [operation] = await OperationStore(pool).of_run(run_id)
        history = (await OperationStore(pool).history([operation.operation_id]))[operation.operation_id]
    finally:
        await pool.close()
    assert operation.state.value == "succeeded"
    assert [step.to_state.value for step in history][-2:] == ["executing", "succeeded"]  # never unknown
    assert operation.task is not None
    assert operation.task["task_id"] == task_events(events)[0]["task_id"]

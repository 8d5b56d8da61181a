"""raydag's task client against a server that does what the reference server never does: a task that asks
for input (raydag gives none: it cancels the task), a session the server dropped (the task is lost), and a
server that lists a task tool without offering tasks. The server is the test's own, over real HTTP."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actors.calls.call import TaskHandle
from actors.calls.mcp.tasks import (
    TaskAsks,
    TaskLost,
    TasksNotOffered,
    follow_task,
    open_task_session,
    session_of,
    start_task,
)
from actors.launch.background_server import BackgroundServer

BOUND = 1 << 20


class ScriptedTasks:
    """One session (``s-1``), one task (``t-1``) whose ``tasks/get`` answers the statuses given, in order."""

    def __init__(self, statuses: list[str], *, offers_tasks: bool = True, unknown_session: int = 404) -> None:
        """``unknown_session``: how a request in a session the server does not have is answered, 404 (the
        transport spec's word) or 400 with a JSON-RPC error (what server-everything answers after a restart)."""
        self.statuses = statuses
        self.offers_tasks = offers_tasks
        self.unknown_session = unknown_session
        self.methods: Counter[str] = Counter()

    async def handle(self, request: Request) -> Response:
        message = json.loads(await request.body())
        method = message.get("method")
        self.methods[method] += 1
        if "id" not in message:
            return Response(status_code=202)
        session = request.headers.get("mcp-session-id")
        if method != "initialize" and session != "s-1":
            if self.unknown_session == 404:
                return Response(status_code=404)
            error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
            return JSONResponse({"jsonrpc": "2.0", "error": error}, status_code=400)
        return JSONResponse(
            {"jsonrpc": "2.0", "id": message["id"], "result": self._result(method)},
            headers={"mcp-session-id": "s-1"} if method == "initialize" else {},
        )

    def _result(self, method: str) -> dict[str, Any]:
        if method == "initialize":
            tasks = {"requests": {"tools": {"call": {}}}} if self.offers_tasks else {}
            return {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tasks": tasks},
                "serverInfo": {"name": "scripted", "version": "1"},
            }
        if method == "tools/call":
            return {"task": {"taskId": "t-1", "status": "working", "pollInterval": 100}}
        if method == "tasks/get":
            status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
            return {"taskId": "t-1", "status": status, "statusMessage": f"now {status}", "pollInterval": 100}
        if method == "tasks/result":
            return {"content": [{"type": "text", "text": "it failed"}], "isError": True}
        return {}


def serving(tasks: ScriptedTasks) -> Iterator[str]:
    app = Starlette(routes=[Route("/mcp", tasks.handle, methods=["POST"])])
    server = BackgroundServer(host="127.0.0.1").start(app)
    try:
        yield server.url + "/mcp"
    finally:
        server.stop()


@pytest.fixture
def asking() -> Iterator[tuple[str, ScriptedTasks]]:
    tasks = ScriptedTasks(["working", "input_required"])
    for url in serving(tasks):
        yield url, tasks


async def test_a_task_that_asks_for_input_is_cancelled_and_fails_the_call(
    asking: tuple[str, ScriptedTasks],
) -> None:
    url, server = asking
    async with httpx2.AsyncClient() as http:
        session = await open_task_session(http, url, max_bytes=BOUND)
        task = await start_task(session, "scripted", "research", {"topic": "x"}, {}, max_bytes=BOUND)
        followed = await follow_task(session, task, within_s=5, max_bytes=BOUND)
        assert isinstance(followed, TaskHandle)
        assert (followed.status, followed.message) == ("working", "now working")  # a change, reported
        with pytest.raises(TaskAsks, match=r"task t-1 asks for input \(now input_required\)"):
            await follow_task(session, followed, within_s=5, max_bytes=BOUND)

    assert server.methods["tasks/cancel"] == 1  # never left hanging at the server
    assert server.methods["tasks/result"] == 0


@pytest.mark.parametrize(
    ("status", "said"), [(404, "no longer has session s-0"), (400, "no longer knows task t-1: Bad Request")]
)
async def test_a_task_whose_session_the_server_dropped_is_lost(status: int, said: str) -> None:
    tasks = ScriptedTasks(["working"], unknown_session=status)
    for url in serving(tasks):
        async with httpx2.AsyncClient() as http:
            forgotten = TaskHandle(server="scripted", task_id="t-1", status="working", session="s-0")
            with pytest.raises(TaskLost, match=said):
                await follow_task(session_of(http, url, forgotten), forgotten, within_s=5, max_bytes=BOUND)


async def test_a_failed_task_answers_its_result_and_a_server_without_tasks_is_refused() -> None:
    tasks = ScriptedTasks(["failed"])
    refusing = ScriptedTasks(["working"], offers_tasks=False)
    for url in serving(tasks):
        async with httpx2.AsyncClient() as http:
            session = await open_task_session(http, url, max_bytes=BOUND)
            task = await start_task(session, "scripted", "research", {}, {}, max_bytes=BOUND)
            result = await follow_task(session, task, within_s=5, max_bytes=BOUND)
    assert not isinstance(result, TaskHandle)
    assert result.is_error  # the tool's own failure, classified as any call's
    for url in serving(refusing):
        async with httpx2.AsyncClient() as http:
            with pytest.raises(TasksNotOffered):
                await open_task_session(http, url, max_bytes=BOUND)

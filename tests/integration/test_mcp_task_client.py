"""raydag's task client against a server that does what the reference server never does: a task that asks
for what raydag never declared (sampling, a URL) before its form question, and stops waiting for the answer;
a session the server dropped (the task is lost); a server that lists a task tool without offering tasks. The
server is the test's own, over real HTTP."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from actors.calls.call import TaskHandle
from actors.calls.mcp.task_state import TaskLost, TasksNotOffered
from actors.calls.mcp.tasks import (
    follow_task,
    open_task_session,
    session_of,
    start_task,
)
from actors.launch.background_server import BackgroundServer

BOUND = 1 << 20


class ScriptedTasks:
    """One session (``s-1``), one task (``t-1``) whose ``tasks/get`` answers the statuses given, in order."""

    def __init__(
        self,
        statuses: list[str],
        *,
        offers_tasks: bool = True,
        unknown_session: int = 404,
        asks: list[dict[str, Any]] | None = None,
        said: str | None = None,
        held: bool = False,
    ) -> None:
        """``unknown_session``: how a request in a session the server does not have is answered, 404 (the
        transport spec's word) or 400 with a JSON-RPC error (what server-everything answers after a restart)."""
        self.statuses = statuses
        self.asks = asks if asks is not None else ASKS
        """What the task asks on ``tasks/result`` while it is ``input_required``."""
        self.said = said
        """The task's ``statusMessage`` (default: ``now <status>``)."""
        self.held = held
        """Each ``tasks/get`` is answered only once the test lets the held ones go (``held = False``)."""
        self.offers_tasks = offers_tasks
        self.unknown_session = unknown_session
        self.methods: Counter[str] = Counter()
        self.polled: list[str] = []
        """The task of each ``tasks/get``, as it arrived."""
        self.current = statuses[0]
        self.declared: dict[str, Any] = {}
        """The capabilities the client declared at ``initialize``."""
        self.answers: dict[Any, dict[str, Any]] = {}
        """The client's answers to the server's own requests, by request id."""

    async def handle(self, request: Request) -> Response:
        message = json.loads(await request.body())
        method = message.get("method")
        self.methods[method] += 1
        if method == "tasks/get":
            self.polled.append(message["params"]["taskId"])
        if method is None and "id" in message:  # the client answering one of the server's requests
            self.answers[message["id"]] = message
            return Response(status_code=202)
        if "id" not in message:
            return Response(status_code=202)
        if method == "initialize":
            self.declared = message["params"]["capabilities"]
        while method == "tasks/get" and self.held:  # noqa: ASYNC110 - the test's thread lets it go
            await asyncio.sleep(0.02)
        if method == "tasks/result" and self.current == "input_required":
            return StreamingResponse(_asking(self.asks), media_type="text/event-stream")
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
            self.current = status
            said = self.said if self.said is not None else f"now {status}"
            return {"taskId": "t-1", "status": status, "statusMessage": said, "pollInterval": 100}
        if method == "tasks/result":
            return {"content": [{"type": "text", "text": "it failed"}], "isError": True}
        return {}


RELATED = {"_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t-1"}}}
FORM = {
    "type": "object",
    "properties": {"choice": {"type": "string", "enum": ["a", "b"]}},
    "required": ["choice"],
}


ASKS = [
    {"id": 1, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5, **RELATED}},
    {"id": 2, "method": "elicitation/create", "params": {"mode": "url", "url": "https://x", **RELATED}},
    {"method": "notifications/message", "params": {"level": "info", "data": "noise"}},
    {
        "id": 4,
        "method": "elicitation/create",
        "params": {"message": "Which one?", "requestedSchema": FORM, **RELATED},
    },
]
"""A model's sampling, a URL to visit, a notification, then a form."""


async def _asking(requests: list[dict[str, Any]]) -> AsyncIterator[bytes]:
    """What the task asks on ``tasks/result``; the stream stays open, as a task that waits for its answers."""
    yield b"data: \n\n"
    for request in requests:
        yield f"data: {json.dumps({'jsonrpc': '2.0', **request})}\n\n".encode()
    await asyncio.sleep(30)


def serving(tasks: ScriptedTasks) -> Iterator[str]:
    app = Starlette(routes=[Route("/mcp", tasks.handle, methods=["POST"])])
    server = BackgroundServer(host="127.0.0.1").start(app)
    try:
        yield server.url + "/mcp"
    finally:
        server.stop()


@pytest.fixture
def asking() -> Iterator[tuple[str, ScriptedTasks]]:
    tasks = ScriptedTasks(["working", "input_required", "input_required", "working"])
    for url in serving(tasks):
        yield url, tasks


async def test_a_task_that_asks_reports_its_form_question_and_refuses_what_raydag_never_declared(
    asking: tuple[str, ScriptedTasks],
) -> None:
    url, server = asking
    async with httpx2.AsyncClient() as http:
        session = await open_task_session(http, url, max_bytes=BOUND)
        task = await start_task(session, "scripted", "research", {"topic": "x"}, {}, max_bytes=BOUND)
        followed = await follow_task(session, task, within_s=5, max_bytes=BOUND)
        assert isinstance(followed, TaskHandle)
        assert (followed.status, followed.question) == ("working", None)
        asks = await follow_task(session, followed, within_s=5, max_bytes=BOUND)
        assert isinstance(asks, TaskHandle)
        assert asks.status == "input_required"
        assert asks.question == {"id": 4, "message": "Which one?", "schema": FORM}
        # Refused at once, as a client that never declared them: sampling unknown, a URL declined.
        assert server.answers[1]["error"]["code"] == -32601
        assert server.answers[2]["result"] == {"action": "decline"}
        assert 4 not in server.answers  # the form waits for a person
        still = await follow_task(session, asks, within_s=5, max_bytes=BOUND)
        assert still == replace(asks, message=still.message)  # one look: the server still waits
        reply = {"action": "accept", "content": {"choice": "b"}}
        went_on = await follow_task(session, asks, within_s=5, max_bytes=BOUND, reply=reply)

    assert server.declared == {"elicitation": {"form": {}}}  # form elicitation only: no sampling, no URL
    assert server.answers[4]["result"] == reply
    assert isinstance(went_on, TaskHandle)
    assert (went_on.status, went_on.question) == ("working", None)
    assert server.methods["tasks/cancel"] == 0


async def test_a_question_the_server_stopped_waiting_for_is_dropped_from_the_task() -> None:
    tasks = ScriptedTasks(["working"])
    for url in serving(tasks):
        async with httpx2.AsyncClient() as http:
            asked = TaskHandle(
                server="scripted",
                task_id="t-1",
                status="input_required",
                session="s-1",
                question={"id": 4, "message": "Which one?", "schema": FORM},
            )
            moved_on = await follow_task(session_of(http, url, asked), asked, within_s=5, max_bytes=BOUND)
    assert isinstance(moved_on, TaskHandle)
    assert (moved_on.status, moved_on.question) == ("working", None)
    assert tasks.answers == {}  # nothing sent for a question nobody answered


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


async def test_what_a_server_says_and_asks_is_kept_only_as_a_record_can_hold_it() -> None:
    """A status message and a question carrying a NUL, a message past what a person reads, and a schema too
    large to be a form: recorded as text a record holds, the schema not kept and the question marked unfit
    (declined by the run)."""
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(2000)}}
    asks = [
        {
            "id": "q-\u00e9",
            "method": "elicitation/create",
            "params": {"message": "a\x00b" + "x" * 5000, "requestedSchema": huge, **RELATED},
        }
    ]
    tasks = ScriptedTasks(["input_required"], asks=asks, said="busy\x00")
    for url in serving(tasks):
        async with httpx2.AsyncClient() as http:
            session = await open_task_session(http, url, max_bytes=BOUND)
            task = await start_task(session, "scripted", "research", {}, {}, max_bytes=BOUND)
            asked = await follow_task(session, task, within_s=5, max_bytes=BOUND)
    assert isinstance(asked, TaskHandle)
    assert asked.message == "busy\ufffd"
    assert asked.question is not None
    assert asked.question["id"] == "q-\u00e9"
    assert asked.question["message"].startswith("a\ufffdb")
    assert len(asked.question["message"]) == 2000
    assert asked.question["schema"] == {}
    assert "larger than" in asked.question["unfit"]


async def test_a_caller_follows_tasks_beside_its_calls_without_taking_their_slots() -> None:
    """A caller that makes one call at a time follows two tasks at once: a follow holds nothing of the server's
    between polls, and used to hold one of the caller's slots, so that many long tasks' follows left every
    other call of the supervisor waiting behind them. Seen at the server: both tasks are polled while it holds
    the first poll unanswered."""
    from actors.calls.call import ToolCall
    from actors.calls.caller import ToolCaller
    from actors.toolsets.config import parse_toolsets
    from mcp_server.contracts import CASEOPS_TOOLS

    tool = "caseops_get_case_snapshot"
    tasks = ScriptedTasks(["working"], held=True)
    for url in serving(tasks):
        [server] = parse_toolsets(
            f"servers:\n  - name: scripted\n    transport: streamable-http\n    url: {url}\n"
            f"    tools:\n      {tool}: {{scope: s, risk: read_only}}\n",
            "t.yaml",
        ).servers
        caller = ToolCaller([server], calls_at_once=1)

        def following(task_id: str, url: str = url) -> ToolCall:
            handle = TaskHandle(server="scripted", task_id=task_id, status="working", session="s-1")
            return ToolCall(
                run_id="r",
                node_id=task_id,
                attempt=1,
                tool=tool,
                args={},
                mcp_url=url,
                token="t",
                timeout_s=30,
                server="scripted",
                task=handle,
            )

        try:
            contract = CASEOPS_TOOLS[tool]
            first = asyncio.ensure_future(caller.call(following("t-1"), contract))
            second = asyncio.ensure_future(caller.call(following("t-2"), contract))
            for _ in range(500):  # a deadline, not a timing: the second poll arrives, or never does
                if {"t-1", "t-2"} <= set(tasks.polled):
                    break
                await asyncio.sleep(0.02)
            polled_together = {"t-1", "t-2"} <= set(tasks.polled) and not first.done()
            tasks.held = False
            outcomes = await asyncio.gather(first, second)
        finally:
            await caller.stop()
    assert polled_together, tasks.polled
    assert all(outcome.pending for outcome in outcomes)  # each followed on: still working

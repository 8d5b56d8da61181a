"""The long-tasks benchmark's MCP server: two tools that wait ``seconds`` and answer, one run as an MCP task.

Raw JSON-RPC over Streamable HTTP (JSON responses), in the 2025-11-25 era whose Tasks raydag speaks, as
``tests/integration/test_mcp_task_client.py``'s scripted server is: cheap enough never to be the bottleneck
(the benchmark reports its CPU), and counting what the question is about at the server itself:

- ``wait_task`` (``execution.taskSupport: required``): ``tools/call`` with a ``task`` answers at once with a
  task; ``tasks/get`` says ``working`` until ``seconds`` have passed since, then ``completed``; ``tasks/result``
  answers the result (waiting for the task's end if asked early, as the spec says);
- ``wait_sync`` (no ``execution``, so ``forbidden``): the ``tools/call`` request is held open ``seconds``.

``GET /stats`` answers the counts since the last ``POST /stats/reset``: requests by method, the most MCP
requests in flight at once, their request-seconds (the integral of requests in flight over time), and the
client connections (distinct client address and port) that carried them, and when the first and last
``tools/call`` arrived and the last result was answered.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actors.launch.background_server import BackgroundServer

TASK_TOOL = "wait_task"
SYNC_TOOL = "wait_sync"
POLL_MS = 1000
"""The ``pollInterval`` the server asks for: server-everything's."""
PROTOCOL = "2025-11-25"
INPUT = {
    "type": "object",
    "properties": {
        "seconds": {"type": "number", "minimum": 0},
        "n": {"type": "integer"},
        "probe": {"type": "boolean"},
    },
    "required": ["seconds"],
}
RELATED = "io.modelcontextprotocol/related-task"


def _tool(name: str, support: str | None) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": "Wait `seconds`, then answer which call this was.",
        "inputSchema": INPUT,
        "annotations": {"readOnlyHint": True},
    }
    if support is not None:
        tool["execution"] = {"taskSupport": support}
    return tool


TOOLS = [_tool(TASK_TOOL, "required"), _tool(SYNC_TOOL, None)]


@dataclass
class _Task:
    task_id: str
    ends: float
    created: str
    answer: dict[str, Any]


@dataclass
class WaitServer:
    """The server's state: its tasks and its counts."""

    tasks: dict[str, _Task] = field(default_factory=dict)
    methods: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    peak_in_flight: int = 0
    request_s: float = 0.0
    clients: set[tuple[str, int]] = field(default_factory=set)
    calls: list[float] = field(default_factory=list)
    """When (epoch seconds) each ``tools/call`` arrived, but a probe's (an argument ``probe: true``)."""
    answers: list[float] = field(default_factory=list)
    """When each call's result was answered: a synchronous call's end, a task's ``tasks/result``."""
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def stats(self) -> dict[str, Any]:
        return {
            "methods": dict(self.methods),
            "peak_in_flight": self.peak_in_flight,
            "request_s": self.request_s,
            "connections_used": len(self.clients),
            "tasks_open": sum(1 for task in self.tasks.values() if task.ends > time.monotonic()),
            "calls": [min(self.calls, default=0.0), max(self.calls, default=0.0)],
            "last_answer": max(self.answers, default=0.0),
        }

    def reset(self) -> None:
        self.methods.clear()
        self.peak_in_flight = self.in_flight
        self.request_s = 0.0
        self.clients.clear()
        self.calls.clear()
        self.answers.clear()

    async def mcp(self, request: Request) -> Response:
        if request.method == "GET":  # no stream of the server's own messages: the spec's answer is 405
            return Response(status_code=405)
        if request.method == "DELETE":
            return Response(status_code=200)
        if request.client is not None:
            self.clients.add((request.client.host, request.client.port))
        started = time.monotonic()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._answer(json.loads(await request.body()))
        finally:
            self.in_flight -= 1
            self.request_s += time.monotonic() - started

    async def _answer(self, message: dict[str, Any]) -> Response:
        method = message.get("method")
        self.methods[str(method)] += 1
        if "id" not in message:  # a notification, or the client's answer to a request (none is ever sent)
            return Response(status_code=202)
        headers = {}
        if method == "initialize":
            headers["mcp-session-id"] = f"s-{next(self._ids)}"
        try:
            result = await self._result(str(method), message.get("params") or {})
        except LookupError as exc:  # an unknown method, tool or task
            error = {"code": -32601 if isinstance(exc, KeyError) else -32602, "message": str(exc)}
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error})
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result}, headers=headers)

    async def _result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        match method:
            case "initialize":
                return {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}},
                    "serverInfo": {"name": "bench-wait", "version": "1"},
                }
            case "ping":
                return {}
            case "tools/list":
                return {"tools": TOOLS}
            case "tools/call":
                return await self._call(params)
            case "tasks/get":
                return self._status(self._task(params))
            case "tasks/result":
                task = self._task(params)
                await asyncio.sleep(max(0.0, task.ends - time.monotonic()))
                self.answers.append(time.time())
                return {**task.answer, "_meta": {RELATED: {"taskId": params["taskId"]}}}
            case _:
                raise KeyError(f"method {method} not offered")

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not (params.get("arguments") or {}).get("probe"):
            self.calls.append(time.time())
        seconds = float((params.get("arguments") or {}).get("seconds", 0))
        answer = {"content": [{"type": "text", "text": f"waited {seconds:g}s: {params.get('arguments')}"}]}
        if name == TASK_TOOL and "task" in params:
            task_id = f"t-{next(self._ids)}"
            task = _Task(task_id, time.monotonic() + seconds, datetime.now(UTC).isoformat(), answer)
            self.tasks[task_id] = task
            return {"task": self._status(task)}
        if name == TASK_TOOL:
            return {"content": [{"type": "text", "text": f"{name} requires a task"}], "isError": True}
        if name != SYNC_TOOL:
            raise LookupError(f"unknown tool {name}")
        await asyncio.sleep(seconds)
        self.answers.append(time.time())
        return answer

    def _task(self, params: dict[str, Any]) -> _Task:
        task = self.tasks.get(str(params.get("taskId")))
        if task is None:
            raise LookupError(f"unknown task {params.get('taskId')}")
        return task

    @staticmethod
    def _status(task: _Task) -> dict[str, Any]:
        return {
            "taskId": task.task_id,
            "status": "completed" if time.monotonic() >= task.ends else "working",
            "createdAt": task.created,
            "lastUpdatedAt": task.created,
            "ttl": 3_600_000,
            "pollInterval": POLL_MS,
        }

    def app(self) -> Starlette:
        async def stats(request: Request) -> Response:
            if request.method == "POST":
                self.reset()
            return JSONResponse(self.stats())

        return Starlette(
            routes=[
                Route("/mcp", self.mcp, methods=["GET", "POST", "DELETE"]),
                Route("/stats", stats, methods=["GET"]),
                Route("/stats/reset", stats, methods=["POST"]),
            ]
        )


def serve(control: Connection) -> None:
    """The server's process: serves on a free loopback port until the parent says stop."""
    http = BackgroundServer()
    http.start(WaitServer().app())
    control.send(http.url)
    control.recv()
    http.stop()

"""The 2025-11-25 Tasks methods of caseops, answered past the SDK: ``mcp`` 2.3.0 has the types of Tasks but
dispatches none of its methods (``mcp_types.methods``: "tasks/* deliberately absent").

Taken here, once the guard has verified the request's token (and, for ``tools/call``, its scope and first
use): a handshake-era ``tools/call`` with a ``task`` parameter for a tool that runs as a task (answered with
``CreateTaskResult`` at once, its work started in this process), and ``tasks/get``, ``tasks/result``,
``tasks/cancel`` and ``tasks/list``, each about the tasks of the token's tenant, case and tool only
(``task_store``). Every other request goes on to the SDK. The work is the tool's own call, checks and all,
run with the verified claims and the task (``task_store.current_task``) in its context.

In the 2026-07-28 era the same tasks are served as the ``io.modelcontextprotocol/tasks`` extension: a
``tools/call`` of such a tool from a client that declares the extension in its request's ``_meta`` is answered
with a task (``resultType: "task"``); ``tasks/get`` inlines the result, or the task's question while it is
``input_required`` (``inputRequests``); ``tasks/update`` takes the answer to it (``inputResponses``) and
acknowledges; ``tasks/cancel`` acknowledges. Only such a task can ask its client for input (``TaskRun.ask``).
A client that does not declare it is answered at once, as before. ``tasks/result`` and ``tasks/list`` are not
of that era.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from mcp.server.mcpserver.tools.base import Tool
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from dag.tokens import TaskClaims
from mcp_server._asgi import respond_json
from mcp_server.auth import Send
from mcp_server.task_store import (
    TERMINAL,
    Owner,
    TaskCancelled,
    TaskRun,
    TaskStore,
    current_task,
    extension_task_json,
    granted_ttl,
    task_json,
    tool_result,
)
from mcp_server.tools import Backend

log = logging.getLogger(__name__)

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
RELATED_TASK = "io.modelcontextprotocol/related-task"
TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/list"})
TASKS_CAPABILITY: Mapping[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
"""What the server advertises at ``initialize`` (2025-11-25): tasks for ``tools/call``, listed, cancelled."""
EXTENSION = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 form of Tasks, advertised in ``server/discover``'s ``capabilities.extensions``."""
EXTENSION_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


def declares_extension(params: Mapping[str, Any]) -> bool:
    """Whether a request's per-request capabilities declare the Tasks extension."""
    meta = params.get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


class TaskRequests:
    """Answers the Tasks requests of the tools named in ``tools``; see the module docstring."""

    def __init__(self, backend: Backend, tools: Mapping[str, Tool]) -> None:
        self._backend = backend
        self._tools = dict(tools)
        self._running: set[asyncio.Task[None]] = set()

    async def answer(
        self, headers: Mapping[str, str], message: Any, claims: TaskClaims | None, send: Send
    ) -> bool:
        """Answer the request if it is one of Tasks, and say whether it did."""
        if not isinstance(message, dict) or claims is None:
            return False
        method, params, request_id = message.get("method"), message.get("params"), message.get("id")
        if not isinstance(params, dict) or request_id is None:
            return False
        store = TaskStore(self._backend.live_pool())
        owner = Owner.of(claims)
        answer: dict[str, Any] | None
        if headers.get(MCP_PROTOCOL_VERSION_HEADER.lower()) in MODERN_PROTOCOL_VERSIONS:
            answer = await self._extension(store, claims, str(method), params)
        elif method == "tools/call" and "task" in params and params.get("name") in self._tools:
            answer = await self._start(store, claims, params)
        elif method == "tasks/list":
            answer = {"result": {"tasks": [task_json(row) for row in await store.list(owner)]}}
        elif method in TASK_METHODS:
            answer = await self._about_task(store, owner, str(method), params.get("taskId"))
        else:
            answer = None
        if answer is None:
            return False
        await respond_json(send, 200, {"jsonrpc": "2.0", "id": request_id, **answer})
        return True

    async def _start(self, store: TaskStore, claims: TaskClaims, params: Mapping[str, Any]) -> dict[str, Any]:
        task = params["task"]
        row = await self._created(
            store, claims, params, granted_ttl(task.get("ttl") if isinstance(task, dict) else None)
        )
        return {"result": {"task": task_json(row)}}

    async def _created(
        self,
        store: TaskStore,
        claims: TaskClaims,
        params: Mapping[str, Any],
        ttl: int,
        *,
        can_ask: bool = False,
    ) -> dict[str, Any]:
        """A new task's row, its work started in this process (``can_ask``: it may ask its client for input)."""
        arguments = params.get("arguments")
        row = await store.create(Owner.of(claims), ttl)
        tool = self._tools[str(params["name"])]
        work = asyncio.create_task(self._run(tool, claims, row["task_id"], dict(arguments or {}), can_ask))
        self._running.add(work)
        work.add_done_callback(self._running.discard)
        return row

    async def _extension(
        self, store: TaskStore, claims: TaskClaims, method: str, params: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The answer of the 2026-07-28 extension to a request, or ``None`` for one it does not take."""
        if method == "tools/call":
            if params.get("name") not in self._tools or not declares_extension(params):
                return None  # a plain call, or a client without the extension: answered at once
            created = await self._created(store, claims, params, granted_ttl(None), can_ask=True)
            return {"result": {"resultType": "task", **extension_task_json(created)}}
        if method not in EXTENSION_METHODS:
            return None
        task_id, owner = params.get("taskId"), Owner.of(claims)
        if not isinstance(task_id, str):
            return _error(INVALID_PARAMS, "taskId must be a string")
        if method == "tasks/update":
            responses = params.get("inputResponses")
            if not isinstance(responses, dict):
                return _error(INVALID_PARAMS, "inputResponses must be an object")
            row = await store.answer(owner, task_id, responses)
        elif method == "tasks/cancel":
            row = await store.cancel(owner, task_id)
        else:
            row = await store.get(owner, task_id)
        if row is None:
            return _error(INVALID_PARAMS, f"task {task_id} not found")
        if method != "tasks/get":  # cancel and update are acknowledged with an empty result
            return {"result": {"resultType": "complete"}}
        return {"result": {"resultType": "complete", **extension_task_json(row, with_result=True)}}

    async def _run(
        self, tool: Tool, claims: TaskClaims, task_id: str, arguments: dict[str, Any], can_ask: bool
    ) -> None:
        """The tool's own call, as a task: its checks, its work by stages, its answer stored with the task."""
        pool = self._backend.live_pool()
        store = TaskStore(pool)
        # this asyncio task's own context
        current_task.set(TaskRun(pool, claims.tenant_id, task_id, can_ask=can_ask))
        try:
            answer = await tool.fn(arguments)
            if isinstance(answer, CallToolResult):
                payload = answer.structured_content or {"error": {"code": "FAILED", "message": "failed"}}
                await store.finish(claims.tenant_id, task_id, payload, is_error=bool(answer.is_error))
            elif isinstance(answer, BaseModel):
                await store.finish(claims.tenant_id, task_id, answer.model_dump(mode="json"), is_error=False)
        except asyncio.CancelledError:  # the server is going away: the task must not stay "working"
            with contextlib.suppress(Exception):
                stopping = {
                    "error": {"code": "SERVER_STOPPED", "message": "the server stopped during the task"}
                }
                await store.finish(claims.tenant_id, task_id, stopping, is_error=True)
            raise
        except TaskCancelled:
            log.info("task %s of %s was cancelled; its work stopped", task_id, tool.name)
        except Exception as exc:  # the task must end, whatever the work raised
            log.exception("task %s of %s failed", task_id, tool.name)
            failure = {"error": {"code": "TASK_FAILED", "message": f"the task failed ({type(exc).__name__})"}}
            with contextlib.suppress(Exception):
                await store.finish(claims.tenant_id, task_id, failure, is_error=True)
        finally:
            with contextlib.suppress(Exception):
                await store.stopped(claims.tenant_id, task_id)

    async def _about_task(self, store: TaskStore, owner: Owner, method: str, task_id: Any) -> dict[str, Any]:
        if not isinstance(task_id, str):
            return _error(INVALID_PARAMS, "taskId must be a string")
        if method == "tasks/cancel":
            row = await store.cancel(owner, task_id)
            if row is not None and row["status"] != "cancelled":
                return _error(
                    INVALID_PARAMS, f"task {task_id} already ended ({row['status']}): it cannot be cancelled"
                )
        else:
            row = await store.get(owner, task_id)
        if row is None:
            return _error(INVALID_PARAMS, f"task {task_id} not found")
        if method != "tasks/result":
            return {"result": task_json(row)}
        while row is not None and row["status"] not in TERMINAL:  # tasks/result waits for the task's end
            await asyncio.sleep(row["poll_interval_ms"] / 1000)
            row = await store.get(owner, task_id)
        if row is None:
            return _error(INVALID_PARAMS, f"task {task_id} not found")
        if row["status"] == "cancelled":
            return _error(INVALID_PARAMS, f"task {task_id} was cancelled: it has no result")
        stored = row["result"]
        payload = json.loads(stored) if isinstance(stored, str) else {}
        result = tool_result(payload, is_error=row["is_error"])
        return {"result": {**result, "_meta": {RELATED_TASK: {"taskId": task_id}}}}

    async def aclose(self) -> None:
        """Stop the work of every task this process runs (the server is going away): each ends ``failed``."""
        running = list(self._running)
        for work in running:
            work.cancel()
        for work in running:
            with contextlib.suppress(asyncio.CancelledError):
                await work


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}

"""Tasks over stdio: a tool call run as an MCP task by a stdio server, started and followed over the one session
raydag holds with that server's process, in either form of Tasks: the 2025-11-25 one (as
``actors.calls.mcp.tasks`` speaks it over HTTP) for a session of the handshake era, the 2026-07-28
``io.modelcontextprotocol/tasks`` extension (``actors.calls.mcp.task_extension``, the same exchanges as over
HTTP) for a session of that era whose ``server/discover`` advertises it.

A stdio server's tasks live in its process's memory, and its process lives only as long as the caller that
started it (``actors.calls.mcp.stdio``). So a task is tied to one *incarnation* of the process: its handle
records that incarnation (``TaskHandle.session``), and a task whose incarnation is not the one running now (the
server died and was restarted, or the caller that held it was replaced) is ``TaskLost`` at once, without asking
the new process (which never knew it). Nothing of a stdio task can be resumed after a crash: what is durable is
the record that it ran, and what the run does about its loss (a read made again, a write ``unknown``).

In the 2025-11-25 form a task's question arrives as the server's own ``elicitation/create`` request on the
session, while a ``tasks/result`` read is outstanding (the reference server asks only then). The SDK hands that
request to the client's elicitation callback, which must answer it; so the callback (``StdioTasks.elicit``)
holds the request open, and the follow that triggered it reports the question. A person's answer, brought by a
later follow, is what the held request returns. The read and the held request belong to this object (one per
incarnation), not to the exchange that started them: an exchange ends, the task and its question wait on. In the
extension's form nothing is held: the question is in ``tasks/get`` (``inputRequests``), the answer goes in
``tasks/update``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, ErrorData, RequestId

from actors.calls.call import MODERN_PROTOCOL, STDIO_SESSION, TaskHandle
from actors.calls.mcp import task_extension as extension
from actors.calls.mcp import task_state as state
from actors.calls.mcp.session import is_modern
from actors.calls.mcp.tasks import ASK_WITHIN_S, RELATED_TASK, TASK_TTL_MS, start_as_task

PlainQuestion = Callable[[RequestId, ElicitRequestParams], Awaitable[ElicitResult]]
"""Where a stdio server's question that names no task goes: the plain call in flight it belongs to."""
HOLD_S = TASK_TTL_MS / 1000
"""The longest a server's question is held open waiting for a person; the run's own deadline (which cancels
the task and so declines the question) normally comes first."""
DECLINE = extension.DECLINE


@dataclass
class _Asked:
    """A question a task of this process asks, held open until ``answer`` is set."""

    question: dict[str, Any]
    answer: asyncio.Future[Mapping[str, Any]] = field(default_factory=asyncio.Future)


class StdioTasks:
    """The tasks of one incarnation of a stdio server's process: their outstanding result reads and the
    questions they hold open. Built with the process's client; its ``elicit`` is that client's callback."""

    def __init__(self, server: str, plain: PlainQuestion | None = None) -> None:
        """``plain``: where a question that names no task goes (a plain call's, ``actors.calls.mcp.held_calls``);
        without it, such a question is declined."""
        self.server = server
        self._plain = plain
        self.session = f"{STDIO_SESSION}{uuid.uuid4().hex}"
        self.client: Client | None = None
        self._asked: dict[str, _Asked] = {}
        self._question_came: dict[str, asyncio.Event] = {}
        self._results: dict[str, asyncio.Task[CallToolResult]] = {}
        self._discovered: Mapping[str, Any] | None = None

    async def start(
        self, tool: str, arguments: Mapping[str, Any], meta: Mapping[str, Any]
    ) -> TaskHandle | CallToolResult:
        """Start ``tool`` as a task of this process, in the form of Tasks of its session's era: its handle,
        naming this incarnation (or, in the 2026-07-28 form, the tool's result if the server answered at once)."""
        client = self._client()
        handle = TaskHandle(server=self.server, task_id="", status="working", session=self.session)
        if is_modern(client):
            if not await self._offers_extension():
                raise state.TasksNotOffered(
                    f"the stdio server does not offer the {extension.EXTENSION} extension"
                )
            return await extension.start(self._request, handle, tool, arguments, meta)
        offered = client.server_capabilities.tasks
        if offered is None or offered.requests is None or offered.requests.tools is None:
            raise state.TasksNotOffered("the stdio server does not offer tasks for tools/call")
        if offered.requests.tools.call is None:
            raise state.TasksNotOffered("the stdio server does not offer tasks for tools/call")
        return await start_as_task(self._request, handle, tool, arguments, meta, protocol="2025-11-25")

    async def follow(
        self, handle: TaskHandle, *, within_s: float, reply: Mapping[str, Any] | None = None
    ) -> TaskHandle | CallToolResult:
        """As ``actors.calls.mcp.tasks.follow_task``: the result once the task ended, or its handle once its
        status, message or question changed (or ``within_s`` passed); ``reply`` answers its question first."""
        self._owns(handle)
        if handle.protocol == MODERN_PROTOCOL:
            if handle.question is not None and reply is not None:
                await extension.answer(self._request, handle, reply)
                handle = replace(handle, question=None)
            return await extension.follow(self._request, handle, within_s=within_s)
        if handle.question is not None and reply is not None:
            self._answer(handle.task_id, reply)
            handle = replace(handle, question=None)

        async def poll(current: TaskHandle) -> TaskHandle:
            polled = state.observed(current, await self._task_request("tasks/get", handle.task_id))
            if polled.status != "input_required":
                self._answer(handle.task_id, DECLINE)  # a question still held was withdrawn: let it go
            elif polled.question is not None and handle.task_id not in self._asked:
                polled = replace(polled, question=None)  # the server went on without the answer
            return polled

        async def find(current: TaskHandle) -> TaskHandle | CallToolResult | None:
            asks = await self._question_of(current.task_id)
            return replace(current, question=asks) if isinstance(asks, dict) else asks

        async def read(current: TaskHandle) -> CallToolResult:
            return await self._result(current.task_id)

        return await state.follow(handle, within_s=within_s, poll=poll, find=find, read=read)

    async def cancel(self, handle: TaskHandle, reply: Mapping[str, Any] | None = None) -> None:
        """Stop the task: its held question answered (``reply``, or declined), then ``tasks/cancel``. A task
        of another incarnation needs no stopping: it is gone."""
        if handle.session != self.session:
            return
        if handle.protocol == MODERN_PROTOCOL:
            if reply is not None:
                with contextlib.suppress(MCPError, state.TaskLost):
                    await extension.answer(self._request, handle, reply)
            await extension.cancel(self._request, handle)
            return
        self._answer(handle.task_id, reply if reply is not None else DECLINE)
        with contextlib.suppress(MCPError, state.TaskLost):
            await self._task_request("tasks/cancel", handle.task_id)
        reading = self._results.pop(handle.task_id, None)
        if reading is not None:
            reading.cancel()

    async def elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """The client's elicitation callback: a form question of one of this process's tasks is held open
        until a person answers (a follow brings the answer) or the task is stopped; anything else is declined,
        as raydag declines every question nobody can answer. A question that names no task is a plain call's, and
        goes to ``plain``."""
        task_id = _related_task(context)
        if task_id is None and self._plain is not None:
            return await self._plain(context.request_id, params)
        message = {
            "id": context.request_id,
            "method": state.ELICIT,
            "params": params.model_dump(by_alias=True, mode="json", exclude_none=True),
        }
        question = state.form_question(message) if task_id is not None else None
        if task_id is None or question is None or task_id in self._asked:
            return ElicitResult(action="decline")
        asked = self._asked[task_id] = _Asked(question)
        self._question_came.setdefault(task_id, asyncio.Event()).set()
        try:
            async with asyncio.timeout(HOLD_S):
                answer = await asked.answer
        except TimeoutError:
            answer = DECLINE
        finally:
            if self._asked.get(task_id) is asked:
                del self._asked[task_id]
            self._question_came.pop(task_id, None)
        return ElicitResult.model_validate(dict(answer))

    def close(self) -> None:
        """The process is gone: its held questions end (declined, though nobody will read it) and so do its
        reads."""
        for asked in self._asked.values():
            if not asked.answer.done():
                asked.answer.set_result(DECLINE)
        for reading in self._results.values():
            reading.cancel()
        self._results.clear()

    def _owns(self, handle: TaskHandle) -> None:
        if handle.session != self.session:
            raise state.TaskLost(
                f"task {handle.task_id} lived in a process of stdio server {self.server} that has ended"
            )

    def _answer(self, task_id: str, reply: Mapping[str, Any]) -> None:
        asked = self._asked.get(task_id)
        if asked is not None and not asked.answer.done():
            asked.answer.set_result(reply)

    async def _question_of(self, task_id: str) -> dict[str, Any] | CallToolResult | None:
        """The question a task that turned ``input_required`` asks: a ``tasks/result`` read is started (the
        server asks only then), and the question is what the callback was handed within ``ASK_WITHIN_S``.
        The task's result instead if it ended meanwhile; ``None`` if neither came (polled again)."""
        if task_id in self._asked:
            return self._asked[task_id].question
        came = self._question_came.setdefault(task_id, asyncio.Event())
        reading = self._reading(task_id)
        asked = asyncio.ensure_future(came.wait())
        try:
            await asyncio.wait({reading, asked}, timeout=ASK_WITHIN_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            asked.cancel()
        if task_id in self._asked:
            return self._asked[task_id].question
        if reading.done():
            return await self._result(task_id)
        return None

    def _reading(self, task_id: str) -> asyncio.Task[CallToolResult]:
        """The task's one outstanding ``tasks/result`` read, started if need be; it belongs to this object,
        not to the exchange that started it."""
        reading = self._results.get(task_id)
        if reading is None:
            reading = asyncio.create_task(self._read_result(task_id), name=f"stdio-task-result:{task_id}")
            self._results[task_id] = reading
        return reading

    async def _read_result(self, task_id: str) -> CallToolResult:
        return CallToolResult.model_validate(await self._task_request("tasks/result", task_id))

    async def _result(self, task_id: str) -> CallToolResult:
        """The ended task's result, read once (by the outstanding read if there is one)."""
        reading = self._reading(task_id)
        try:
            return await asyncio.shield(reading)
        finally:
            if reading.done():
                self._results.pop(task_id, None)

    async def _task_request(self, method: str, task_id: str) -> dict[str, Any]:
        try:
            return await self._request(method, {"taskId": task_id})
        except MCPError as exc:  # the server answers, but not for this task; or the process is gone
            raise state.TaskLost(
                f"stdio server {self.server} no longer knows task {task_id}: {exc.error.message}"
            ) from None

    async def _request(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """One request over the process's session, its raw result: the SDK's typed ``tools/call`` refuses the
        task a server answers with (the task started, its id lost), so the session's dispatcher is asked. In the
        2026-07-28 era the request carries the ``_meta`` envelope (the extension declared) the SDK would add."""
        client = self._client()
        if is_modern(client):
            params = extension.with_envelope(params)
        raw: dict[str, Any] = await client.session._dispatcher.send_raw_request(method, params, {})
        return raw

    async def _offers_extension(self) -> bool:
        """Whether the process's ``server/discover`` advertises the extension: the result its session
        negotiated with (``auto``) if that says so, else (a session pinned to 2026-07-28 starts from a
        result made up by the SDK, saying nothing) the server's answer, asked once per incarnation."""
        if self._discovered is None:
            client = self._client()
            known = client.session.discover_result
            negotiated = known.model_dump(by_alias=True, mode="json", exclude_none=True) if known else {}
            if extension.offers_tasks(negotiated):
                self._discovered = negotiated
            else:
                self._discovered = await client.session.send_discover(client.protocol_version)
        return extension.offers_tasks(self._discovered)

    def _client(self) -> Client:
        if self.client is None:
            raise state.TaskLost(f"the process of stdio server {self.server} has ended")
        return self.client


def _related_task(context: ClientRequestContext) -> str | None:
    """The task a server's request belongs to (``_meta`` ``io.modelcontextprotocol/related-task``)."""
    meta = context.meta
    related = meta.get(RELATED_TASK) if isinstance(meta, Mapping) else None
    task_id = related.get("taskId") if isinstance(related, Mapping) else None
    return task_id if isinstance(task_id, str) else None

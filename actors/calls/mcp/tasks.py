"""A tool call that runs as an MCP task, as a client: started, then followed, from any process.

The 2025-11-25 form of Tasks (what ``@modelcontextprotocol/server-everything`` speaks): ``tools/call`` with a
``task`` parameter answers at once with the task (its id, status, poll interval); ``tasks/get`` reports its
status and ``statusMessage``; ``tasks/result`` answers the tool's result once it ended; ``tasks/cancel`` stops
it. Tasks are per session, in the server's memory: a task can be followed from another process only over the
same Streamable HTTP session, so each task gets a session of its own, opened here, whose id goes into the
task's handle (``TaskHandle``), and which raydag never terminates (a ``DELETE`` would drop the task with it;
the server expires the session with the task's ``ttl``).

The SDK offers no client helper for tasks, and its typed ``tools/call`` refuses the task the server answers
with (the task is started, its id lost), so these requests are raydag's own JSON-RPC POSTs, over the HTTP
client that carries the server's credentials. Nothing here decides what a result means for the node: that is
``actors.calls.mcp.outcomes``, as for a plain call.

A session of the 2026-07-28 era speaks the ``io.modelcontextprotocol/tasks`` extension instead: the same
handle, recorded and followed the same way, only the wire differs, and each function here asks
``actors.calls.mcp.task_extension`` for that difference (no session, no handshake; the tasks live in the
server's storage, so a task is followed by its id alone).
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
import httpx2
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import CallToolResult

from actors.calls.call import MODERN_PROTOCOL, TaskHandle
from actors.calls.mcp import task_extension as extension
from actors.calls.mcp.session import CLIENT_INFO
from actors.calls.mcp.stateless_post import MalformedAnswer, Refused, rpc_answer
from actors.calls.mcp.task_state import (
    ELICIT,
    TaskLost,
    TasksNotOffered,
    fit_id,
    follow,
    form_question,
    observed,
    updated_handle,
)

TASKS_PROTOCOL = "2025-11-25"
"""The protocol version a task session is opened in: the era whose Tasks servers speak today."""
NEGOTIATED = "auto"
"""A server of either era: its tasks take the extension's form if it offers it, else the 2025-11-25 one."""
SESSION_HEADER = "mcp-session-id"
TASK_TTL_MS = 24 * 3600 * 1000
"""The lifetime raydag asks for a task (a server may grant less): a day, as long as a run may wait."""
FOLLOW_S = 10.0
"""The longest one exchange follows a task before it reports back; it reports sooner when the task's status
or message changes, or it ends."""
ASK_WITHIN_S = 5.0
"""How long a task that turned ``input_required`` is given to deliver its question on ``tasks/result``."""
CLIENT_CAPABILITIES: Mapping[str, Any] = {"elicitation": {"form": {}}}
RELATED_TASK = "io.modelcontextprotocol/related-task"
METHOD_NOT_FOUND = -32601
_ids = itertools.count(1)
_CLIENT_INFO = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)


@dataclass(frozen=True)
class TaskSession:
    """One Streamable HTTP session of a server's, as raydag's requests carry it."""

    http: httpx2.AsyncClient
    url: str
    session: str | None
    protocol: str = TASKS_PROTOCOL

    @property
    def modern(self) -> bool:
        """Whether the tasks are the 2026-07-28 extension's (``task_extension``)."""
        return self.protocol == MODERN_PROTOCOL

    async def request(self, method: str, params: Mapping[str, Any], *, max_bytes: int) -> dict[str, Any]:
        """The result of one JSON-RPC request; ``MCPError`` for a JSON-RPC error, ``Refused`` for an HTTP
        refusal that says no more, ``TaskLost`` for a session the server no longer has (404)."""
        headers = self._headers()
        if self.modern:
            headers.update(extension.routing_headers(method, params))
            params = extension.with_envelope(params)
        message, _ = await _exchange(self.http, self.url, headers, method, params, max_bytes)
        result = message.get("result")
        if not isinstance(result, dict):
            raise MalformedAnswer("MALFORMED_ANSWER", f"the server's answer to {method} holds no result")
        return result

    async def notify(self, method: str) -> None:
        body = {"jsonrpc": "2.0", "method": method}
        response = await self.http.post(self.url, content=json.dumps(body), headers=self._headers())
        await response.aclose()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session is not None:
            headers[SESSION_HEADER] = self.session
            headers[MCP_PROTOCOL_VERSION_HEADER] = self.protocol
        return headers


async def open_task_session(
    http: httpx2.AsyncClient, url: str, *, max_bytes: int, protocol: str = TASKS_PROTOCOL
) -> TaskSession:
    """A new session of the server at ``url`` for one task: initialized, its tasks for ``tools/call`` checked.
    In the 2026-07-28 era there is no session to open: ``server/discover`` must advertise the extension. A
    server of the ``auto`` era (``NEGOTIATED``) gets the newer form when its ``server/discover`` advertises the
    extension, and the 2025-11-25 one when it refuses ``server/discover`` or offers no extension (as the SDK's
    client falls back to the handshake).

    The client declares form elicitation, the one kind of question raydag puts to a person: a task may ask
    mid-way (``input_required``), and its question waits in the run's inbox (``actors.run.tool_questions``).
    Sampling and URL elicitation are not declared; a server that asks for them anyway is refused."""
    if protocol in (MODERN_PROTOCOL, NEGOTIATED):
        stateless = TaskSession(http, url, None, MODERN_PROTOCOL)
        try:
            discovered = await stateless.request("server/discover", {}, max_bytes=max_bytes)
        except (MCPError, Refused):
            if protocol == MODERN_PROTOCOL:
                raise
            discovered = {}  # a server of the handshake era
        if extension.offers_tasks(discovered):
            return stateless
        if protocol == MODERN_PROTOCOL:
            raise TasksNotOffered(f"the server does not offer the {extension.EXTENSION} extension")
    opening = TaskSession(http, url, None)
    params = {
        "protocolVersion": TASKS_PROTOCOL,
        "capabilities": CLIENT_CAPABILITIES,
        "clientInfo": _CLIENT_INFO,
    }
    message, session = await _exchange(http, url, opening._headers(), "initialize", params, max_bytes)
    result = message.get("result") or {}
    tasks = ((result.get("capabilities") or {}).get("tasks") or {}).get("requests") or {}
    if "call" not in (tasks.get("tools") or {}):
        raise TasksNotOffered("the server does not offer tasks for tools/call")
    opened = TaskSession(http, url, session, str(result.get("protocolVersion") or TASKS_PROTOCOL))
    await opened.notify("notifications/initialized")
    return opened


async def start_task(
    session: TaskSession,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
    *,
    max_bytes: int,
) -> TaskHandle | CallToolResult:
    """Start ``tool`` as a task: its handle, as the server created it (or, in the 2026-07-28 era, where the
    server decides, the tool's result if it answered at once)."""
    handle = TaskHandle(server=server, task_id="", status="working", session=session.session)
    if session.modern:
        return await extension.start(_requester(session, max_bytes), handle, tool, arguments, meta)
    return await start_as_task(
        _requester(session, max_bytes), handle, tool, arguments, meta, protocol=session.protocol
    )


async def start_as_task(
    request: extension.Requester,
    handle: TaskHandle,
    tool: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
    *,
    protocol: str,
) -> TaskHandle:
    """``tool`` called with a ``task`` parameter (the 2025-11-25 form), over whatever carries the request (a
    task's HTTP session, a stdio server's): the task it created, as ``handle`` updated with it."""
    params: dict[str, Any] = {"name": tool, "arguments": dict(arguments), "task": {"ttl": TASK_TTL_MS}}
    if meta:
        params["_meta"] = dict(meta)
    result = await request("tools/call", params)
    task = result.get("task")
    task_id = task.get("taskId") if isinstance(task, dict) else None
    if not isinstance(task, dict) or not fit_id(task_id):
        raise MalformedAnswer(
            "MALFORMED_ANSWER", f"{tool} was called as a task, and the server answered no task"
        )
    return updated_handle(replace(handle, task_id=str(task_id)), task, protocol=protocol)


async def follow_task(
    session: TaskSession,
    handle: TaskHandle,
    *,
    within_s: float,
    max_bytes: int,
    reply: Mapping[str, Any] | None = None,
) -> TaskHandle | CallToolResult:
    """The task's result once it ended, or its handle as soon as its status or message changed (or
    ``within_s`` passed with neither): polled with ``tasks/get`` at the server's interval.

    A task that asks for input (``input_required``) reports its question (``TaskHandle.question``) as a
    change. While that question waits for a person, one ``tasks/get`` says whether the server still waits
    (the handle keeps its question) or went on without the answer (the question is dropped). ``reply`` is a
    person's answer to it: sent first, then the task is followed as before."""
    if handle.question is not None and reply is not None:
        await send_reply(session, handle, reply, max_bytes=max_bytes)
        handle = replace(handle, question=None)
    if session.modern:
        return await extension.follow(_requester(session, max_bytes), handle, within_s=within_s)

    async def poll(current: TaskHandle) -> TaskHandle:
        try:
            reported = await session.request("tasks/get", {"taskId": handle.task_id}, max_bytes=max_bytes)
        except MCPError as exc:  # the server answers, but not for this task: it forgot it
            raise TaskLost(f"the server no longer knows task {handle.task_id}: {exc.error.message}") from None
        return observed(current, reported)

    async def find(current: TaskHandle) -> TaskHandle | CallToolResult | None:
        asks = await _question_of(session, current, within_s=ASK_WITHIN_S, max_bytes=max_bytes)
        return replace(current, question=asks) if isinstance(asks, dict) else asks

    async def read(current: TaskHandle) -> CallToolResult:
        answer = await session.request("tasks/result", {"taskId": handle.task_id}, max_bytes=max_bytes)
        return CallToolResult.model_validate(answer)

    return await follow(handle, within_s=within_s, poll=poll, find=find, read=read)


async def send_reply(
    session: TaskSession, handle: TaskHandle, reply: Mapping[str, Any], *, max_bytes: int
) -> None:
    """Send a person's answer to the question ``handle`` records: a response to the server's request
    (2025-11-25), or a ``tasks/update`` (2026-07-28)."""
    if handle.question is None:
        return
    if not session.modern:
        await answer_request(session, handle.question["id"], result=reply, max_bytes=max_bytes)
        return
    await extension.answer(_requester(session, max_bytes), handle, reply)


def _requester(session: TaskSession, max_bytes: int) -> extension.Requester:
    """The session's requests as the extension's exchanges make them."""

    async def request(method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        return await session.request(method, params, max_bytes=max_bytes)

    return request


async def _question_of(
    session: TaskSession, handle: TaskHandle, *, within_s: float, max_bytes: int
) -> dict[str, Any] | CallToolResult | None:
    """The question a task that turned ``input_required`` asks: the server delivers it as a request of its
    own on the event stream of ``tasks/result`` (not while the task is polled). Its result instead, if the
    task ended meanwhile; ``None`` if no question came within ``within_s`` (the task is polled again).

    Only a form elicitation is a question for a person. Anything else the server asks is refused at once, as
    a client that never declared it: a URL elicitation declined, any other request answered "method not
    found" (sampling included: raydag never lets a tool server drive its model)."""
    request_id = next(_ids)
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tasks/result",
        "params": {"taskId": handle.task_id},
    }
    size = 0
    with anyio.move_on_after(within_s):
        async with session.http.stream(
            "POST", session.url, content=json.dumps(body), headers=session._headers()
        ) as response:
            kind = response.headers.get("content-type", "").split(";", 1)[0].strip()
            if response.status_code == 404 and session.session is not None:
                raise TaskLost(f"the server no longer has session {session.session}")
            if kind != "text/event-stream":  # answered at once, as JSON: the task's result, or an error
                raw = await _read(response, max_bytes)
                message = rpc_answer(
                    response.status_code, response.headers.get("www-authenticate", ""), kind, raw, request_id
                )
                return CallToolResult.model_validate(message.get("result") or {})
            async for line in response.aiter_lines():
                size += len(line)
                if size > max_bytes:
                    raise MalformedAnswer(
                        "OUTPUT_TOO_LARGE", f"the answer is larger than the {max_bytes:,} bytes read"
                    )
                if not line.startswith("data:") or not line[5:].strip():
                    continue
                message = json.loads(line[5:])
                if not isinstance(message, dict):
                    continue
                if "method" not in message:
                    if message.get("id") == request_id:  # the task ended before it asked anything
                        answered = rpc_answer(
                            200, "", "application/json", json.dumps(message).encode(), request_id
                        )
                        return CallToolResult.model_validate(answered.get("result") or {})
                    continue
                if "id" not in message or not _about(message, handle.task_id):
                    continue  # a notification, or a request about another task of the session
                question = form_question(message)
                if question is not None:
                    return question
                await _refuse(session, message, max_bytes=max_bytes)
    return None


def _about(message: Mapping[str, Any], task_id: str) -> bool:
    """Whether a server's request belongs to ``task_id`` (one that names no task is taken as the session's
    only task's: a task's session is its own)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
    return not isinstance(related, dict) or related.get("taskId") == task_id


async def _refuse(session: TaskSession, message: Mapping[str, Any], *, max_bytes: int) -> None:
    """Refuse a server's request raydag puts to nobody: a URL elicitation declined, anything else unknown."""
    if message.get("method") == ELICIT:
        await answer_request(session, message["id"], result={"action": "decline"}, max_bytes=max_bytes)
        return
    error = {"code": METHOD_NOT_FOUND, "message": f"raydag does not answer {message.get('method')!s:.80}"}
    await answer_request(session, message["id"], error=error, max_bytes=max_bytes)


async def answer_request(
    session: TaskSession,
    request_id: Any,
    *,
    result: Mapping[str, Any] | None = None,
    error: Mapping[str, Any] | None = None,
    max_bytes: int,
) -> None:
    """Answer a server's request in the task's session: a JSON-RPC response, which the server acknowledges
    with 202. A session the server no longer has is ``TaskLost``; a request it no longer waits for is its
    own affair (it went on without the answer)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        body["error"] = dict(error)
    else:
        body["result"] = dict(result or {})
    async with session.http.stream(
        "POST", session.url, content=json.dumps(body), headers=session._headers()
    ) as response:
        await _read(response, max_bytes)
        status = response.status_code
    if status == 404 and session.session is not None:
        raise TaskLost(f"the server no longer has session {session.session}")


async def cancel_task(session: TaskSession, handle: TaskHandle, *, max_bytes: int) -> None:
    """Ask the server to stop the task; a task it no longer knows needs no stopping."""
    with contextlib.suppress(MCPError, TaskLost):
        await session.request("tasks/cancel", {"taskId": handle.task_id}, max_bytes=max_bytes)


def session_of(http: httpx2.AsyncClient, url: str, handle: TaskHandle) -> TaskSession:
    """The session ``handle``'s task lives in, as a request from any process carries it."""
    return TaskSession(http, url, handle.session, handle.protocol)


async def _exchange(
    http: httpx2.AsyncClient,
    url: str,
    headers: dict[str, str],
    method: str,
    params: Mapping[str, Any],
    max_bytes: int,
) -> tuple[dict[str, Any], str | None]:
    """One JSON-RPC request's answer, and the session id its response named. A 404 within a session is the
    server saying it no longer has that session (``TaskLost``)."""
    request_id = next(_ids)
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)}
    async with http.stream("POST", url, content=json.dumps(body), headers=headers) as response:
        raw = await _read(response, max_bytes)
        kind = response.headers.get("content-type", "").split(";", 1)[0].strip()
        status, challenge = response.status_code, response.headers.get("www-authenticate", "")
        session = response.headers.get(SESSION_HEADER)
    if status == 404 and SESSION_HEADER in headers:
        raise TaskLost(f"the server no longer has session {headers[SESSION_HEADER]}")
    return rpc_answer(status, challenge, kind, raw, request_id), session


async def _read(response: httpx2.Response, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise MalformedAnswer(
                "OUTPUT_TOO_LARGE", f"the answer is larger than the {max_bytes:,} bytes read"
            )
        chunks.append(chunk)
    return b"".join(chunks)

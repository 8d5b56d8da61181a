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
import time
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
from dag.storable import storable_text, unfit_values
from dag.tool_questions import MAX_SCHEMA_BYTES, MAX_SERVER_MESSAGE_CHARS

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
ELICIT = "elicitation/create"
RELATED_TASK = "io.modelcontextprotocol/related-task"
METHOD_NOT_FOUND = -32601
MAX_ID_CHARS = 200
_ids = itertools.count(1)
_CLIENT_INFO = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)


class TaskLost(Exception):
    """The server no longer knows the task (it restarted, or dropped the session): its result will never
    come, and the call is made again where that is safe."""


class TasksNotOffered(Exception):
    """The server lists a tool as running as a task, but does not offer tasks for ``tools/call``."""


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
    params: dict[str, Any] = {"name": tool, "arguments": dict(arguments)}
    if not session.modern:
        params["task"] = {"ttl": TASK_TTL_MS}
    if meta:
        params["_meta"] = dict(meta)
    result = await session.request("tools/call", params, max_bytes=max_bytes)
    if session.modern:
        created = extension.created_task(result)
        if created is None:
            return CallToolResult.model_validate(result)
        result = {"task": created}
    task = result.get("task")
    task_id = task.get("taskId") if isinstance(task, dict) else None
    if not isinstance(task, dict) or not fit_id(task_id):
        raise MalformedAnswer(
            "MALFORMED_ANSWER", f"{tool} was called as a task, and the server answered no task"
        )
    return updated_handle(
        TaskHandle(server=server, task_id=task["taskId"], status="working", session=session.session),
        task,
        protocol=session.protocol,
    )


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
        return await _follow_extension(session, handle, within_s=within_s, max_bytes=max_bytes)
    give_up = time.monotonic() + within_s
    current = handle
    while True:
        try:
            reported = await session.request("tasks/get", {"taskId": handle.task_id}, max_bytes=max_bytes)
        except MCPError as exc:  # the server answers, but not for this task: it forgot it
            raise TaskLost(f"the server no longer knows task {handle.task_id}: {exc.error.message}") from None
        current = updated_handle(current, reported)
        if current.status != "input_required":
            current = replace(current, question=None)
        elif current.question is not None:  # its question waits for a person: the server still waits too
            return current
        else:
            asks = await _question_of(session, current, within_s=ASK_WITHIN_S, max_bytes=max_bytes)
            if isinstance(asks, CallToolResult):
                return asks
            if asks is not None:
                return replace(current, question=asks)
        if current.ended:
            if current.status == "cancelled":
                return current
            answer = await session.request("tasks/result", {"taskId": handle.task_id}, max_bytes=max_bytes)
            return CallToolResult.model_validate(answer)
        if report_now(handle, current, give_up):
            return current
        await anyio.sleep(current.poll_s)


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
    key = str(handle.question["id"])
    try:
        await session.request(
            "tasks/update", extension.update_params(handle.task_id, key, reply), max_bytes=max_bytes
        )
    except MCPError as exc:
        raise TaskLost(f"the server no longer knows task {handle.task_id}: {exc.error.message}") from None


async def _follow_extension(
    session: TaskSession, handle: TaskHandle, *, within_s: float, max_bytes: int
) -> TaskHandle | CallToolResult:
    """``follow_task`` over the 2026-07-28 extension: ``tasks/get`` carries the result, the error or the
    question itself. A question raydag puts to nobody (not a form elicitation) is declined at once when it
    is an elicitation; any other kind stops the task (``tasks/update`` has no "method not found")."""
    give_up = time.monotonic() + within_s
    current = handle
    while True:
        try:
            task = await session.request("tasks/get", {"taskId": handle.task_id}, max_bytes=max_bytes)
        except MCPError as exc:  # -32602: the server does not know the task (expired, or never its)
            raise TaskLost(f"the server no longer knows task {handle.task_id}: {exc.error.message}") from None
        current = updated_handle(current, extension.task_fields(task))
        payload = extension.reported(task)
        if payload.result is not None:
            return CallToolResult.model_validate(payload.result)
        if payload.error is not None:
            code, said = payload.error.get("code"), payload.error.get("message")
            raise MCPError(
                code if isinstance(code, int) else -32603, str(said or "")[:MAX_SERVER_MESSAGE_CHARS]
            )
        if current.status != "input_required":
            current = replace(current, question=None)
        elif current.question is None and payload.questions:
            asked = extension.first_question(payload.questions)
            question = form_question(asked[1]) if asked is not None else None
            if question is not None:
                return replace(current, question=question)
            if asked is not None and asked[1].get("method") == ELICIT:
                declined = extension.update_params(handle.task_id, asked[0], {"action": "decline"})
                await session.request("tasks/update", declined, max_bytes=max_bytes)
            elif asked is not None:
                await cancel_task(session, current, max_bytes=max_bytes)
                raise MalformedAnswer(
                    "TASK_INPUT_UNSUPPORTED", f"task {handle.task_id} asks for {asked[1].get('method')!s:.80}"
                )
        elif current.question is not None:
            return current
        if current.ended:  # ended with neither result nor error: cancelled
            return current
        if report_now(handle, current, give_up):
            return current
        await anyio.sleep(current.poll_s)


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


def fit_id(value: Any) -> bool:
    """Whether ``value`` is an id of the server's that a record can hold and a person can quote."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS and storable_text(value) == value


def form_question(message: Mapping[str, Any]) -> dict[str, Any] | None:
    """A form elicitation as the question recorded with the task: the request's id, the server's message and
    the schema it asks an answer to (``unfit``: why that schema cannot be put to a person, and is declined);
    ``None`` for any other request, or one whose id no record should hold.

    Everything here is the server's and goes into the run's log: the message is cut to what a person reads
    and made storable, and a schema too large or holding what no record can hold is not kept."""
    params = message.get("params")
    request_id = message.get("id")
    if message.get("method") != ELICIT or not isinstance(params, dict):
        return None
    if not (isinstance(request_id, int) or fit_id(request_id)):
        return None
    if params.get("mode", "form") != "form" or not isinstance(params.get("requestedSchema"), dict):
        return None
    text = params.get("message")
    schema: dict[str, Any] = params["requestedSchema"]
    unfit = None
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        unfit = f"the requested schema is larger than {MAX_SCHEMA_BYTES:,} bytes"
    elif next(unfit_values(schema), None) is not None:
        unfit = "the requested schema holds text no record can hold (a NUL, a lone surrogate)"
    question = {
        "id": request_id,
        "message": storable_text(text)[:MAX_SERVER_MESSAGE_CHARS] if isinstance(text, str) else "",
        "schema": {} if unfit else schema,
    }
    return {**question, "unfit": unfit} if unfit else question


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


def report_now(handle: TaskHandle, current: TaskHandle, give_up: float) -> bool:
    """Whether a follow that started at ``handle`` reports ``current`` back now: its status or message
    changed, or waiting another poll interval would pass ``give_up`` (a ``time.monotonic()``)."""
    if (current.status, current.message) != (handle.status, handle.message):
        return True
    return time.monotonic() + current.poll_s > give_up


def updated_handle(handle: TaskHandle, task: Mapping[str, Any], *, protocol: str | None = None) -> TaskHandle:
    status = task.get("status")
    said = task.get("statusMessage")
    message = storable_text(said)[:MAX_SERVER_MESSAGE_CHARS] if isinstance(said, str) else None
    interval = task.get("pollInterval")
    return replace(
        handle,
        status=storable_text(status)[:40] if isinstance(status, str) else handle.status,
        message=message if isinstance(message, str) else handle.message,
        poll_s=min(max(interval / 1000, 0.1), 30.0) if isinstance(interval, int | float) else handle.poll_s,
        protocol=protocol or handle.protocol,
    )


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

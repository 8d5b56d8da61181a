"""The 2026-07-28 form of Tasks, the ``io.modelcontextprotocol/tasks`` extension: its wire shapes, and a task's
exchanges in that form over whatever carries one request (a ``Requester``: a Streamable HTTP POST,
``actors.calls.mcp.tasks``, or a stdio server's session, ``actors.calls.mcp.stdio_tasks``).

Where it differs from the 2025-11-25 form (``actors.calls.mcp.tasks``, which asks these functions whenever its
session is of the 2026-07-28 era): no session and no handshake; the client declares the extension in each
request's ``_meta`` (``io.modelcontextprotocol/clientCapabilities``) and the server says it offers it in
``server/discover`` (``capabilities.extensions``); a ``tools/call`` carries no ``task`` parameter, and the
server decides whether to answer with a task (``resultType: "task"``, the task's fields at the top of the
result) or with the tool's result at once; ``tasks/get`` inlines the result (``completed``), the JSON-RPC
error (``failed``) or the questions (``input_required``: ``inputRequests``, answered with ``tasks/update``);
there is no ``tasks/result`` nor ``tasks/list``; ``ttlMs`` and ``pollIntervalMs`` replace ``ttl`` and
``pollInterval``. Source: the extension's specification, ``specification/draft/tasks.md`` of
``modelcontextprotocol/ext-tasks`` (docs/TOOLSETS.md says what raydag implements of it). What a followed
task's state means is decided where it is for every form (``actors.calls.mcp.task_state.next_step``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    encode_header_value,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    CallToolResult,
)

from actors.calls.call import MODERN_PROTOCOL, TaskHandle
from actors.calls.mcp import task_state as state
from actors.calls.mcp.session import CLIENT_INFO
from actors.calls.mcp.stateless_post import MalformedAnswer
from dag.tool_questions import MAX_SERVER_MESSAGE_CHARS

EXTENSION = "io.modelcontextprotocol/tasks"
DECLINE: Mapping[str, Any] = {"action": "decline"}
Requester = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""One request of the extension's, as its transport carries it (the ``_meta`` envelope included): its result,
``MCPError`` for a JSON-RPC error."""
_CLIENT_INFO = CLIENT_INFO.model_dump(by_alias=True, mode="json", exclude_none=True)
DECLARED: Mapping[str, Any] = {"elicitation": {"form": {}}, "extensions": {EXTENSION: {}}}
"""The client's per-request capabilities: the extension, and form elicitation (a task's question goes to a
person, ``actors.run.tool_questions``)."""


def with_envelope(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the 2026-07-28 ``_meta`` envelope, the extension declared (any ``_meta`` kept)."""
    meta = params.get("_meta")
    envelope = {
        **(dict(meta) if isinstance(meta, Mapping) else {}),
        PROTOCOL_VERSION_META_KEY: MODERN_PROTOCOL,
        CLIENT_INFO_META_KEY: _CLIENT_INFO,
        CLIENT_CAPABILITIES_META_KEY: dict(DECLARED),
    }
    return {**params, "_meta": envelope}


def routing_headers(method: str, params: Mapping[str, Any]) -> dict[str, str]:
    """The 2026-07-28 routing headers: ``Mcp-Name`` is the tool for ``tools/call``, the task id for
    ``tasks/*`` (so that an intermediary routes a task's requests to the replica holding it)."""
    headers = {MCP_PROTOCOL_VERSION_HEADER: MODERN_PROTOCOL, MCP_METHOD_HEADER: method}
    name = params.get("name") if method == "tools/call" else params.get("taskId")
    if isinstance(name, str):
        headers[MCP_NAME_HEADER] = encode_header_value(name)
    return headers


def offers_tasks(discovered: Mapping[str, Any]) -> bool:
    """Whether a ``server/discover`` result advertises the extension."""
    capabilities = discovered.get("capabilities")
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and isinstance(extensions.get(EXTENSION), Mapping)


def created_task(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The task a ``tools/call`` result created (``resultType: "task"``), or ``None`` for a result the
    server answered at once (the server decides, per request)."""
    return result if result.get("resultType") == "task" else None


def task_fields(task: Mapping[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 task's fields under the 2025-11-25 names the handle is updated from."""
    fields = {key: task[key] for key in ("status", "statusMessage") if key in task}
    if "pollIntervalMs" in task:
        fields["pollInterval"] = task["pollIntervalMs"]
    return fields


@dataclass(frozen=True)
class Reported:
    """What a ``tasks/get`` answered besides the task's status: its result, its error or its questions."""

    result: Mapping[str, Any] | None = None
    """The tool's result, inlined once ``completed`` (an ``isError`` result included)."""
    error: Mapping[str, Any] | None = None
    """The JSON-RPC error the task ``failed`` with."""
    questions: Mapping[str, Mapping[str, Any]] | None = None
    """``inputRequests`` while ``input_required``: key → a server-to-client request."""


def reported(task: Mapping[str, Any]) -> Reported:
    """The payload a ``tasks/get`` result carries for its status (what is missing stays ``None``)."""
    status = task.get("status")
    result, error, questions = task.get("result"), task.get("error"), task.get("inputRequests")
    if status == "completed" and isinstance(result, Mapping):
        return Reported(result=result)
    if status == "failed":
        return Reported(error=error if isinstance(error, Mapping) else {"code": -32603, "message": ""})
    if status == "input_required" and isinstance(questions, Mapping):
        return Reported(questions={str(k): v for k, v in questions.items() if isinstance(v, Mapping)})
    return Reported()


def first_question(
    questions: Mapping[str, Mapping[str, Any]], answered: frozenset[str] = frozenset()
) -> tuple[str, Mapping[str, Any]] | None:
    """The first outstanding request not yet answered, as ``(key, request)`` in the 2025-11-25 request
    shape (``method``, ``params``, and its key as ``id``) that raydag's question-taking already reads."""
    for key in sorted(questions):
        if key not in answered:
            request = questions[key]
            return key, {"id": key, "method": request.get("method"), "params": request.get("params")}
    return None


def update_params(task_id: str, key: str, response: Mapping[str, Any]) -> dict[str, Any]:
    """``tasks/update``'s params: one answer (an elicitation's result) to the request under ``key``."""
    return {"taskId": task_id, "inputResponses": {key: dict(response)}}


async def start(
    request: Requester,
    handle: TaskHandle,
    tool: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any],
) -> TaskHandle | CallToolResult:
    """Call ``tool``: the task it created, as ``handle`` (its server and session) updated with it, or the
    tool's result if the server answered at once (it decides, per request)."""
    params: dict[str, Any] = {"name": tool, "arguments": dict(arguments)}
    if meta:
        params["_meta"] = dict(meta)
    result = await request("tools/call", params)
    created = created_task(result)
    if created is None:
        return CallToolResult.model_validate(result)
    task_id = created.get("taskId")
    if not state.fit_id(task_id):
        raise MalformedAnswer(
            "MALFORMED_ANSWER", f"{tool} was called as a task, and the server answered no task"
        )
    return state.updated_handle(
        replace(handle, task_id=str(task_id)), task_fields(created), protocol=MODERN_PROTOCOL
    )


async def follow(request: Requester, handle: TaskHandle, *, within_s: float) -> TaskHandle | CallToolResult:
    """The task's result once it completed, or its handle as soon as its status, message or question changed
    (or ``within_s`` passed with neither): ``tasks/get`` alone, which carries the result, the error or the
    question itself. A question raydag puts to nobody (not a form elicitation) is declined at once when it is
    an elicitation; any other kind stops the task (``tasks/update`` has no "method not found")."""
    questions: dict[str, Mapping[str, Any]] = {}

    async def poll(current: TaskHandle) -> TaskHandle | CallToolResult:
        try:
            task = await request("tasks/get", {"taskId": handle.task_id})
        except MCPError as exc:  # -32602: the server does not know the task (expired, or never its)
            raise state.TaskLost(
                f"the server no longer knows task {handle.task_id}: {exc.error.message}"
            ) from None
        payload = reported(task)
        if payload.result is not None:
            return CallToolResult.model_validate(payload.result)
        if payload.error is not None:
            code, said = payload.error.get("code"), payload.error.get("message")
            raise MCPError(
                code if isinstance(code, int) else -32603, str(said or "")[:MAX_SERVER_MESSAGE_CHARS]
            )
        questions.clear()
        questions.update(payload.questions or {})
        return state.observed(current, task_fields(task))

    async def find(current: TaskHandle) -> TaskHandle | None:
        question = await _question(request, current, questions)
        return replace(current, question=question) if question is not None else None

    async def read(current: TaskHandle) -> TaskHandle:
        return current  # ended with no result inlined: nothing more to read

    return await state.follow(handle, within_s=within_s, poll=poll, find=find, read=read)


async def answer(request: Requester, handle: TaskHandle, reply: Mapping[str, Any]) -> None:
    """Send a person's answer to the question ``handle`` records: a ``tasks/update``."""
    if handle.question is None:
        return
    key = str(handle.question["id"])
    try:
        await request("tasks/update", update_params(handle.task_id, key, reply))
    except MCPError as exc:
        raise state.TaskLost(
            f"the server no longer knows task {handle.task_id}: {exc.error.message}"
        ) from None


async def cancel(request: Requester, handle: TaskHandle) -> None:
    """Ask the server to stop the task; a task it no longer knows needs no stopping."""
    with contextlib.suppress(MCPError):
        await request("tasks/cancel", {"taskId": handle.task_id})


async def _question(
    request: Requester, handle: TaskHandle, questions: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The first of the task's ``inputRequests`` as a question for a person; ``None`` if it has none that is
    one (an elicitation of another kind is declined, anything else cancels the task and fails the call)."""
    asked = first_question(questions)
    if asked is None:
        return None
    question = state.form_question(asked[1])
    if question is not None:
        return question
    if asked[1].get("method") == state.ELICIT:
        await request("tasks/update", update_params(handle.task_id, asked[0], DECLINE))
        return None
    await cancel(request, handle)
    raise MalformedAnswer(
        "TASK_INPUT_UNSUPPORTED", f"task {handle.task_id} asks for {asked[1].get('method')!s:.80}"
    )

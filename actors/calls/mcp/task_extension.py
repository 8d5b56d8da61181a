"""The 2026-07-28 form of Tasks, the ``io.modelcontextprotocol/tasks`` extension, as wire shapes: pure.

Where it differs from the 2025-11-25 form (``actors.calls.mcp.tasks``, which asks these functions whenever its
session is of the 2026-07-28 era): no session and no handshake; the client declares the extension in each
request's ``_meta`` (``io.modelcontextprotocol/clientCapabilities``) and the server says it offers it in
``server/discover`` (``capabilities.extensions``); a ``tools/call`` carries no ``task`` parameter, and the
server decides whether to answer with a task (``resultType: "task"``, the task's fields at the top of the
result) or with the tool's result at once; ``tasks/get`` inlines the result (``completed``), the JSON-RPC
error (``failed``) or the questions (``input_required``: ``inputRequests``, answered with ``tasks/update``);
there is no ``tasks/result`` nor ``tasks/list``; ``ttlMs`` and ``pollIntervalMs`` replace ``ttl`` and
``pollInterval``. Source: the extension's specification, ``specification/draft/tasks.md`` of
``modelcontextprotocol/ext-tasks`` (docs/TOOLSETS.md says what raydag implements of it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    encode_header_value,
)
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from actors.calls.call import MODERN_PROTOCOL
from actors.calls.mcp.session import CLIENT_INFO

EXTENSION = "io.modelcontextprotocol/tasks"
ELICIT = "elicitation/create"
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

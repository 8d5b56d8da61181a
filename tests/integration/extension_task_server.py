"""A stdio MCP server of the tests' own that runs its one tool as a task of the 2026-07-28
``io.modelcontextprotocol/tasks`` extension (``python tests/integration/extension_task_server.py LOG``).

caseops speaks the extension over Streamable HTTP only (its tenant and case come from the bearer task token, and
its tasks are answered in front of the SDK, in its HTTP guard), so the stdio form is tested against this one.
Raw JSON-RPC over stdin/stdout, standard library only: ``server/discover`` advertises the extension;
``slow_export`` answers a ``tools/call`` that declares it with a task (``resultType: "task"``) whose work moves
through stages (``EXT_TASK_STAGE_S`` each), asking where to export (``inputRequests``, a form elicitation)
first when ``confirm`` is true; ``tasks/get`` inlines the result; ``tasks/update`` takes the answer;
``tasks/cancel`` stops the work. A call that does not declare the extension is refused, as is an unknown task.

What happens is appended to LOG as JSON lines, each with this process's pid: every request's method, and the
work's own ``started``, ``answered``, ``cancelled``, ``stopped`` and ``completed``; the tests count there.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from typing import Any

EXTENSION = "io.modelcontextprotocol/tasks"
PROTOCOL = "2026-07-28"
TOOL = "slow_export"
STAGES = ("gathering the documents", "packing the bundle", "sealing the bundle")
QUESTION_KEY = "destination"
STAGE_S = float(os.environ.get("EXT_TASK_STAGE_S", "0.5"))
LISTING = {
    "name": TOOL,
    "description": "Export a labelled bundle; takes a few seconds, runs as a task.",
    "inputSchema": {
        "type": "object",
        "properties": {"label": {"type": "string"}, "confirm": {"type": "boolean"}},
        "required": ["label"],
    },
    "annotations": {"readOnlyHint": True},
}
QUESTION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Where should the bundle go?",
        "requestedSchema": {
            "type": "object",
            "properties": {"destination": {"type": "string", "enum": ["archive", "court"]}},
            "required": ["destination"],
        },
    },
}

_out = threading.Lock()
_log = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115 - open for the server's whole life


def note(event: str, **fields: Any) -> None:
    with _out:
        _log.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")
        _log.flush()


def send(message: dict[str, Any]) -> None:
    with _out:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
        sys.stdout.flush()


class Task:
    def __init__(self, label: str, confirm: bool) -> None:
        self.task_id = uuid.uuid4().hex
        self.label = label
        self.confirm = confirm
        self.status = "working"
        self.message = "accepted"
        self.result: dict[str, Any] | None = None
        self.answer: dict[str, Any] | None = None
        self.answered = threading.Event()
        self.cancelled = threading.Event()

    def json(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.message,
            "ttlMs": 60_000,
            "pollIntervalMs": 100,
        }
        if self.status == "input_required":
            task["inputRequests"] = {QUESTION_KEY: QUESTION}
        if self.result is not None:
            task["result"] = self.result
        return task

    def work(self) -> None:
        note("started", task=self.task_id)
        destination = "archive"
        for number, stage in enumerate(STAGES):
            if number == 1 and self.confirm:
                self.status, self.message = "input_required", "waiting for a destination"
                while not (self.answered.is_set() or self.cancelled.is_set()):
                    self.answered.wait(0.05)
                if self.cancelled.is_set():
                    note("stopped", task=self.task_id, stage="the question")
                    return
                if self.answer is not None and self.answer.get("action") == "accept":
                    destination = str((self.answer.get("content") or {}).get("destination"))
                self.status = "working"
            self.message = stage
            if self.cancelled.wait(STAGE_S):
                note("stopped", task=self.task_id, stage=stage)
                return
        text = f"exported {self.label} to {destination}"
        self.result = {"content": [{"type": "text", "text": text}], "isError": False}
        self.status, self.message = "completed", "done"
        note("completed", task=self.task_id)


TASKS: dict[str, Task] = {}


def declares_extension(params: dict[str, Any]) -> bool:
    meta = params.get("_meta") or {}
    capabilities = meta.get("io.modelcontextprotocol/clientCapabilities") or {}
    return EXTENSION in (capabilities.get("extensions") or {})


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request's ``result`` or ``error`` member."""
    complete = {"resultType": "complete"}
    if method == "server/discover":
        capabilities: dict[str, Any] = {"tools": {}, "extensions": {EXTENSION: {}}}
        discovered = {"supportedVersions": [PROTOCOL], "capabilities": capabilities, "ttlMs": 0}
        return {"result": {**complete, **discovered, "cacheScope": "public"}}
    if method == "tools/list":
        return {"result": {**complete, "tools": [LISTING], "ttlMs": 0, "cacheScope": "public"}}
    if method == "tools/call":
        if params.get("name") != TOOL or not declares_extension(params):
            return {"error": {"code": -32602, "message": f"{TOOL} runs only as a task of {EXTENSION}"}}
        arguments = params.get("arguments") or {}
        created = Task(str(arguments.get("label")), bool(arguments.get("confirm")))
        TASKS[created.task_id] = created
        threading.Thread(target=created.work, daemon=True).start()
        return {"result": {"resultType": "task", **created.json()}}
    task = TASKS.get(str(params.get("taskId")))
    if method not in ("tasks/get", "tasks/update", "tasks/cancel"):
        return {"error": {"code": -32601, "message": f"no method {method}"}}
    if task is None:
        return {"error": {"code": -32602, "message": "task not found"}}
    if method == "tasks/get":
        return {"result": {**complete, **task.json()}}
    if method == "tasks/update":
        task.answer = (params.get("inputResponses") or {}).get(QUESTION_KEY)
        note("answered", task=task.task_id, answer=task.answer)
        task.answered.set()
        return {"result": complete}
    if task.status not in ("completed", "cancelled"):
        note("cancelled", task=task.task_id)
        task.cancelled.set()
        task.status, task.message = "cancelled", "cancelled by the client"
    return {"result": complete}


def main() -> None:
    note("up")
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "method" not in message:
            continue
        note("request", method=message["method"], tool=(message.get("params") or {}).get("name"))
        if "id" in message:
            send({"id": message["id"], **answer(str(message["method"]), message.get("params") or {})})


if __name__ == "__main__":
    main()

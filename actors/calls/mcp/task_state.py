"""What a followed MCP task's state means, whatever its form of Tasks and whatever carries it.

Four followers poll a task: the 2025-11-25 form over Streamable HTTP (``actors.calls.mcp.tasks``) and over a
stdio server's session (``actors.calls.mcp.stdio_tasks``), and the 2026-07-28 extension over either
(``actors.calls.mcp.task_extension``). They differ in how they ask and where a question or a result arrives;
what they do with the task's state once reported is decided here, once (``next_step``), and one loop acts on it
(``follow``) with the exchanges its follower gives it. The handle is updated from what the server said
(``observed``), and a question is recorded in one shape (``form_question``). No SDK, and no exchange of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio

from actors.calls.call import TaskHandle
from dag.storable import storable_text, unfit_values
from dag.tool_questions import MAX_SCHEMA_BYTES, MAX_SERVER_MESSAGE_CHARS

ELICIT = "elicitation/create"
MAX_ID_CHARS = 200
R = TypeVar("R")
"""The tool's result, as a follower reads it."""


class TaskLost(Exception):
    """The server no longer knows the task (it restarted, or dropped the session): its result will never
    come, and the call is made again where that is safe."""


class TasksNotOffered(Exception):
    """The server lists a tool as running as a task, but does not offer tasks for ``tools/call``."""


@dataclass(frozen=True)
class Report:
    """Hand the handle back to the run: its status, message or question changed, or the follow's time is up
    (a cancelled task is reported too: it has no result)."""

    handle: TaskHandle


@dataclass(frozen=True)
class ReadResult:
    """The task ended: its result is read (in the 2026-07-28 form ``tasks/get`` has inlined it already)."""


@dataclass(frozen=True)
class FindQuestion:
    """The task waits for input and its question is not known yet: the follower looks for it where its form
    delivers it, then asks ``next_step`` again with ``looked=True``."""


@dataclass(frozen=True)
class Poll:
    """Nothing to report yet: ask the server again after ``after_s``."""

    after_s: float


Step = Report | ReadResult | FindQuestion | Poll


def next_step(started: TaskHandle, current: TaskHandle, give_up: float, *, looked: bool = False) -> Step:
    """What a follow that started at ``started`` does with the task as last reported (``current``, carrying
    the question its follower holds, see ``observed``) when it must report by ``give_up`` (a
    ``time.monotonic()``). ``looked``: the question was looked for in this round and none was found."""
    if current.status == "input_required":
        if current.question is not None:  # its question waits for a person: so does the server
            return Report(current)
        if not looked:
            return FindQuestion()
    elif current.ended:
        return Report(current) if current.status == "cancelled" else ReadResult()
    if report_now(started, current, give_up):
        return Report(current)
    return Poll(current.poll_s)


async def follow(
    started: TaskHandle,
    *,
    within_s: float,
    poll: Callable[[TaskHandle], Awaitable[TaskHandle | R]],
    find: Callable[[TaskHandle], Awaitable[TaskHandle | R | None]],
    read: Callable[[TaskHandle], Awaitable[TaskHandle | R]],
) -> TaskHandle | R:
    """Follow a task from ``started`` until ``next_step`` says to report it (or it answered its result):
    ``poll`` asks the server for the task's state (the handle it observes, or the result where the form
    inlines it), ``find`` looks for its question (the handle asking it, the result if the task ended
    meanwhile, ``None`` if none came), ``read`` reads an ended task's result."""
    give_up = time.monotonic() + within_s
    current = started
    while True:
        polled = await poll(current)
        if not isinstance(polled, TaskHandle):
            return polled
        current = polled
        step = next_step(started, current, give_up)
        if isinstance(step, FindQuestion):
            found = await find(current)
            if found is not None:
                return found
            step = next_step(started, current, give_up, looked=True)
        match step:
            case Report(handle=reporting):
                return reporting
            case ReadResult():
                return await read(current)
            case Poll(after_s=after_s):
                await anyio.sleep(after_s)
            case FindQuestion():  # looked already: ``next_step`` does not ask again
                raise AssertionError("next_step asked for a question it was told was looked for")


def observed(current: TaskHandle, task: Mapping[str, Any]) -> TaskHandle:
    """``current`` updated from a reported task (2025-11-25 field names); a task no longer waiting for input
    keeps no question."""
    updated = updated_handle(current, task)
    return updated if updated.status == "input_required" else replace(updated, question=None)


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

"""A plain call its server's question holds open (``actors.calls.mcp.held_calls``): what is put to a person,
what is declined at once, and how the answer reaches the waiting request. The server is a coroutine standing in
for the SDK's dispatch of ``elicitation/create`` (the request's path over a real server is the integration
tests')."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, TextContent
from pydantic import TypeAdapter

from actors.calls.call import HELD_SESSION, TaskHandle
from actors.calls.mcp.held_calls import HeldCalls
from actors.calls.mcp.task_state import TaskLost
from actors.calls.mcp.watch import current_hold

PARAMS: TypeAdapter[ElicitRequestParams] = TypeAdapter(ElicitRequestParams)
FORM: dict[str, Any] = {
    "mode": "form",
    "message": "Which case?",
    "requestedSchema": {"type": "object", "properties": {"case": {"type": "string"}}, "required": ["case"]},
}


def server_asking(
    params: dict[str, Any], *, times: int = 1, answered: asyncio.Event | None = None
) -> tuple[Any, list[ElicitResult]]:
    """A call whose server asks ``params`` (``times`` over, at once) and then reports what it was answered
    (``answered`` set then)."""
    answers: list[ElicitResult] = []

    async def send() -> CallToolResult:
        held = current_hold.get()
        assert held is not None, "the call's context carries its hold"
        asked = [held.ask(7 + n, PARAMS.validate_python(params)) for n in range(times)]
        answers.extend(await asyncio.gather(*asked))
        if answered is not None:
            answered.set()
        return CallToolResult(content=[TextContent(type="text", text=answers[0].action)])

    return send, answers


async def test_a_form_question_comes_back_as_a_handle_and_the_persons_answer_reaches_the_server() -> None:
    calls = HeldCalls()
    send, answers = server_asking(FORM)
    handle = await calls.call("caseops", "open_case", send, timeout_s=30)
    assert isinstance(handle, TaskHandle)
    assert handle.session == calls.session
    assert handle.session.startswith(HELD_SESSION)
    assert handle.status == "input_required"
    assert handle.question is not None
    assert (handle.question["id"], handle.question["message"]) == (7, "Which case?")
    assert "answer_by" in handle.question
    still = await calls.follow(handle, None, within_s=1)  # only asking whether the server still waits
    assert isinstance(still, TaskHandle)
    assert still.question == handle.question
    reply = {"action": "accept", "content": {"case": "C-1"}}
    result = await calls.follow(handle, reply, within_s=5)
    assert isinstance(result, CallToolResult)
    assert [answer.model_dump(exclude_none=True) for answer in answers] == [reply]


async def test_a_url_elicitation_is_declined_at_once_never_put_to_a_person() -> None:
    url = {"mode": "url", "message": "Open this", "url": "https://example.com/x", "elicitationId": "e-1"}
    send, answers = server_asking(url)
    result = await HeldCalls().call("everything", "trigger-url-elicitation", send, timeout_s=30)
    assert isinstance(result, CallToolResult)
    assert [answer.action for answer in answers] == ["decline"]


async def test_a_question_that_comes_too_close_to_the_calls_deadline_is_declined_at_once() -> None:
    send, answers = server_asking(FORM)
    result = await HeldCalls().call("caseops", "open_case", send, timeout_s=0.5)
    assert isinstance(result, CallToolResult)
    assert [answer.action for answer in answers] == ["decline"]


async def test_a_second_question_while_one_waits_is_declined() -> None:
    calls = HeldCalls()
    send, answers = server_asking(FORM, times=2)
    handle = await calls.call("caseops", "open_case", send, timeout_s=30)
    assert isinstance(handle, TaskHandle)
    result = await calls.follow(handle, {"action": "decline"}, within_s=5)
    assert isinstance(result, CallToolResult)
    assert sorted(answer.action for answer in answers) == ["decline", "decline"]


async def test_a_question_still_waiting_near_the_calls_deadline_is_answered_cancel() -> None:
    answered = asyncio.Event()
    send, answers = server_asking(FORM, answered=answered)
    handle = await HeldCalls().call("caseops", "open_case", send, timeout_s=1.5)
    assert isinstance(handle, TaskHandle)
    async with asyncio.timeout(5):  # nobody answers: the held request gives up 1 s before the deadline
        await answered.wait()
    assert [answer.action for answer in answers] == ["cancel"]


async def test_a_call_this_process_does_not_hold_is_lost() -> None:
    handle = TaskHandle(
        server="caseops", task_id="gone", status="input_required", session=f"{HELD_SESSION}other"
    )
    with pytest.raises(TaskLost):
        await HeldCalls().follow(handle, {"action": "decline"}, within_s=1)

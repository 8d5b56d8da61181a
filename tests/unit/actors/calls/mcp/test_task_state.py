"""What a follower does with a task's reported state (``task_state.next_step``): one decision for every form of
Tasks and every transport."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from actors.calls.call import TaskHandle
from actors.calls.mcp.task_state import FindQuestion, Poll, ReadResult, Report, next_step, observed

STARTED = TaskHandle(server="s", task_id="t", status="working", message="stage 1", poll_s=0.5)


def later() -> float:
    """A give-up time an hour from now, taken when the test runs: a module-level one, taken at collection,
    had passed by the time a test ran on a busy worker."""
    return time.monotonic() + 3600


QUESTION = {"id": "k", "message": "which?", "schema": {"type": "object"}}


def test_a_task_still_working_as_it_was_is_polled_again_at_its_interval() -> None:
    assert next_step(STARTED, STARTED, later()) == Poll(0.5)


def test_a_changed_message_or_status_is_reported_at_once() -> None:
    moved = replace(STARTED, message="stage 2")
    assert next_step(STARTED, moved, later()) == Report(moved)


def test_a_follow_whose_time_is_up_reports_the_task_as_it_stands() -> None:
    assert next_step(STARTED, STARTED, time.monotonic()) == Report(STARTED)


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_task_that_ended_has_its_result_read(status: str) -> None:
    assert next_step(STARTED, replace(STARTED, status=status), later()) == ReadResult()


def test_a_cancelled_task_is_reported_it_has_no_result() -> None:
    cancelled = replace(STARTED, status="cancelled")
    assert next_step(STARTED, cancelled, later()) == Report(cancelled)


def test_a_task_waiting_for_input_has_its_question_looked_for_once_then_waits() -> None:
    waiting = replace(STARTED, status="input_required")
    assert next_step(STARTED, waiting, later()) == FindQuestion()
    assert next_step(STARTED, waiting, later(), looked=True) == Report(waiting)  # its status changed


def test_a_question_known_is_reported_the_server_waits_for_a_person() -> None:
    asking = replace(STARTED, status="input_required", question=QUESTION)
    assert next_step(asking, asking, later()) == Report(asking)


def test_a_task_no_longer_waiting_for_input_keeps_no_question() -> None:
    asking = replace(STARTED, status="input_required", question=QUESTION)
    assert observed(asking, {"status": "working"}).question is None
    assert observed(asking, {"status": "input_required"}).question == QUESTION

"""A run whose plan review or question waits for a person is parked on it, and reads the row when woken."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from actors.run.context import HandedOver, Parked
from actors.run.recorder import RunRecorder, now
from actors.run.waiting import decided_or_park
from dag.events import PlanningStarted, QuestionAsked, RunParked
from dag.run_state import apply
from tests.run_fakes import RecordingSink, run_created


@dataclass
class Row:
    state: str
    expires_at: datetime


class Rows:
    """A row as a person's decision leaves it, and what was done to it."""

    def __init__(self, state: str = "awaiting", expires_in: timedelta = timedelta(days=1)) -> None:
        self.row = Row(state, now() + expires_in)
        self.reads = 0
        self.expired = 0

    async def read(self) -> Row:
        self.reads += 1
        return self.row

    async def expire(self) -> Row:
        self.expired += 1
        self.row = Row("expired", self.row.expires_at)
        return self.row


def waiting_run(sink: RecordingSink) -> RunRecorder:
    """A run whose planner asked a question: ``waiting``, with nothing else to do."""
    state = apply(apply(None, run_created()), PlanningStarted(at=now(), round=1))
    asked = QuestionAsked(at=now(), round=1, number=1, text="which?", expires_at=now() + timedelta(days=1))
    return RunRecorder(apply(state, asked), 1, sink)


async def hold(run: RunRecorder, rows: Rows, *, cancel: bool = False, handover: bool = False) -> Row:
    cancelled, handed_over = asyncio.Event(), asyncio.Event()
    if cancel:
        cancelled.set()
    if handover:
        handed_over.set()
    return await decided_or_park(
        run,
        rows.read,
        awaiting=lambda row: row.state == "awaiting",
        expires_at=lambda row: row.expires_at,
        expire=rows.expire,
        cancel=cancelled,
        handover=handed_over,
        wait="question:1",
    )


async def test_a_row_still_awaiting_parks_the_run_until_its_deadline() -> None:
    sink = RecordingSink()
    run, rows = waiting_run(sink), Rows()

    with pytest.raises(Parked) as parked:
        await hold(run, rows)

    assert parked.value.waits == ("question:1",)
    [(_, events, state)] = sink.appends
    assert events == (RunParked(at=events[0].at, waits=("question:1",), wake_at=rows.row.expires_at),)
    assert state.parked_since == events[0].at
    assert rows.expired == 0


async def test_a_decided_row_is_returned_and_nothing_is_recorded() -> None:
    sink = RecordingSink()

    row = await hold(waiting_run(sink), Rows("answered"))

    assert row.state == "answered"
    assert sink.appends == []


@pytest.mark.parametrize("cancel", [True, False], ids=["cancelled", "past-its-deadline"])
async def test_a_row_past_its_deadline_or_of_a_cancelled_run_is_expired_not_parked(cancel: bool) -> None:
    sink = RecordingSink()
    rows = Rows(expires_in=timedelta(days=1) if cancel else -timedelta(seconds=1))

    row = await hold(waiting_run(sink), rows, cancel=cancel)

    assert (row.state, rows.expired) == ("expired", 1)
    assert sink.appends == []


async def test_a_stopping_supervisor_hands_the_run_over_unparked() -> None:
    sink = RecordingSink()

    with pytest.raises(HandedOver):
        await hold(waiting_run(sink), Rows(), handover=True)

    assert sink.appends == []

"""A run waiting on a person reads its row when a decision wakes it, not only at its next scheduled read."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from actors.run.recorder import now
from actors.run.waiting import decided


@dataclass
class Row:
    state: str
    expires_at: datetime


class Rows:
    """A row as a person's decision leaves it, and how often it was read."""

    def __init__(self) -> None:
        self.row = Row("awaiting", now() + timedelta(hours=1))
        self.reads = 0
        self.read_again = asyncio.Event()
        """Set at each read (a test clears it to see the next)."""

    async def read(self) -> Row:
        self.reads += 1
        self.read_again.set()
        return self.row

    async def expire(self) -> Row:
        raise AssertionError("nothing expires here")


async def wait_on(rows: Rows, woken: asyncio.Event) -> Row:
    return await decided(
        rows.read,
        awaiting=lambda row: row.state == "awaiting",
        expires_at=lambda row: row.expires_at,
        expire=rows.expire,
        cancel=asyncio.Event(),
        handover=asyncio.Event(),
        what="a test's row",
        woken=woken,
        read_every_s=lambda: 3600.0,  # no scheduled read within the test: only a wake-up reads again
    )


async def test_a_decision_that_wakes_the_waiter_is_read_at_once() -> None:
    rows, woken = Rows(), asyncio.Event()
    waiter = asyncio.ensure_future(wait_on(rows, woken))
    await rows.read_again.wait()

    rows.row = Row("approved", rows.row.expires_at)
    woken.set()
    # The guard turns a waiter that never reads again into a failure, not a hang.
    decision = await asyncio.wait_for(waiter, 10)

    assert decision.state == "approved"
    assert rows.reads == 2


async def test_a_wake_up_with_nothing_decided_reads_and_waits_again() -> None:
    rows, woken = Rows(), asyncio.Event()
    waiter = asyncio.ensure_future(wait_on(rows, woken))
    await rows.read_again.wait()
    rows.read_again.clear()

    woken.set()  # another decision of the run (an operation's, say): this row is still awaiting
    await rows.read_again.wait()
    for _ in range(10):
        await asyncio.sleep(0)

    assert not waiter.done()
    assert not woken.is_set()  # cleared before the read: the next decision wakes it again
    rows.row = Row("rejected", rows.row.expires_at)
    woken.set()
    assert (await asyncio.wait_for(waiter, 10)).state == "rejected"
    assert rows.reads == 3

"""Waiting for a person: a run's plan review or its planner's question is a row a person decides, and the run
watches that row until it is decided, its deadline passes, the run is cancelled or its supervisor stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from actors.run.context import HandedOver
from actors.run.recorder import now

_Row = TypeVar("_Row")


async def decided(
    read: Callable[[], Awaitable[_Row | None]],
    *,
    awaiting: Callable[[_Row], bool],
    expires_at: Callable[[_Row], datetime],
    expire: Callable[[], Awaitable[_Row | None]],
    cancel: asyncio.Event,
    handover: asyncio.Event,
    what: str,
    woken: asyncio.Event,
    read_every_s: Callable[[], float],
) -> _Row:
    """The row once it no longer ``awaiting``: decided by a person, or expired by ``expire`` once its deadline
    passed or the run was cancelled (a decision made at that last moment stands). Raises ``HandedOver`` when
    the supervisor stops first: the row stays, and whoever resumes the run waits on it. The row is read again
    when ``woken`` is set (a decision was written: ``DecisionWakeups``), and at least every ``read_every_s()``."""
    while True:
        woken.clear()  # before the read: a decision written after it wakes the next wait
        row = await read()
        assert row is not None, f"{what} was recorded before the run waited on it"
        if awaiting(row) and (cancel.is_set() or now() >= expires_at(row)):
            expired = await expire()
            if expired is None:
                continue  # decided between the read and the update: that decision stands
            row = expired
        if not awaiting(row):
            return row
        if handover.is_set():
            raise HandedOver(f"handed over while {what} waits for a person")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(read_every_s()):
                await _first(cancel, handover, woken)


async def _first(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()

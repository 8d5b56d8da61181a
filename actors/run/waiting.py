"""Waiting for a person: a run's plan review or its planner's question is a row a person decides. Nothing else
of the run can go on meanwhile, so the run is parked (``RunParked``) until the row is decided or its deadline
comes: it holds no turn, no lease and no connection while a person takes hours or days."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from actors.run.context import HandedOver, Parked
from actors.run.recorder import RunRecorder, now
from dag.events import RunParked

_Row = TypeVar("_Row")


async def decided_or_park(
    run: RunRecorder,
    read: Callable[[], Awaitable[_Row | None]],
    *,
    awaiting: Callable[[_Row], bool],
    expires_at: Callable[[_Row], datetime],
    expire: Callable[[], Awaitable[_Row | None]],
    cancel: asyncio.Event,
    handover: asyncio.Event,
    wait: str,
) -> _Row:
    """The row once it no longer ``awaiting``: decided by a person, or expired by ``expire`` because its
    deadline passed or the run was cancelled (a decision made at that last moment stands). While it still
    waits, the run is parked on ``wait`` (``review:<round>``, ``question:<number>``) until the deadline, and
    ``Parked`` is raised: whoever wakes the run asks again. Raises ``HandedOver`` when the supervisor stops."""
    row = await read()
    assert row is not None, f"{wait} was recorded before the run waited on it"
    if awaiting(row) and (cancel.is_set() or now() >= expires_at(row)):
        expired = await expire()
        row = expired if expired is not None else await read()  # None: a decision came first, and stands
        assert row is not None
    if not awaiting(row):
        return row
    if handover.is_set():
        raise HandedOver(f"handed over while {wait} waits for a person")
    await run.record(RunParked(at=now(), waits=(wait,), wake_at=expires_at(row)))
    raise Parked(run.state.run_id, (wait,))

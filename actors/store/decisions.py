"""Wake-ups for runs that wait on a person: a decision written to a plan review, a question or an operation
notifies channel ``raydag_decided`` with the run's id (a trigger, migration 0014, whoever writes it), and a
supervisor's ``DecisionWakeups`` listens on one connection of its own and wakes that run's waiters at once.

A waiter still reads its row now and then (``read_every_s``): a notification sent while the listener was
reconnecting is never delivered, so each (re)connection wakes every waiter to read once, and while the
listener is down waiters read as often as they did before there was one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg

log = logging.getLogger(__name__)

CHANNEL = "raydag_decided"
LISTENING_READ_EVERY_S = 5.0
"""How often a waiter reads its row while the listener is up: only a lost notification waits this long."""
UNHEARD_READ_EVERY_S = 0.25
"""How often a waiter reads its row while nobody listens (no listener, or its connection lost)."""
CHECK_EVERY_S = 30.0
"""How often an idle listener's connection is checked: a peer gone without closing it is noticed by then."""
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 10.0


class DecisionWakeups:
    """One listening connection for a supervisor's waiting runs."""

    def __init__(self, dsn: str | None, *, application_name: str = "raydag") -> None:
        self._dsn = dsn
        self._application_name = application_name
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._listening = False
        self.unwatched: Callable[[str], None] | None = None
        """Told of a decision about a run none of this process's waiters watches (a parked run)."""

    @property
    def read_every_s(self) -> float:
        """How long a waiter may go without reading its row."""
        return LISTENING_READ_EVERY_S if self._listening else UNHEARD_READ_EVERY_S

    @contextlib.contextmanager
    def watching(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set when a decision about ``run_id`` may have been written; its waiter clears it before
        each read of its row."""
        woken = asyncio.Event()
        self._watchers.setdefault(run_id, set()).add(woken)
        try:
            yield woken
        finally:
            watchers = self._watchers.get(run_id)
            if watchers is not None:
                watchers.discard(woken)
                if not watchers:
                    del self._watchers[run_id]

    async def keep_listening(self) -> None:
        """Forever: listen on the channel, and on a lost connection connect again (with backoff)."""
        if self._dsn is None:
            return
        delay = RECONNECT_FIRST_S
        while True:
            try:
                await self._listen(self._dsn)
            except Exception as exc:  # the database down, or the connection refused: waiters read as before
                log.warning("listening for decisions failed (%s); again in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            delay = RECONNECT_FIRST_S  # it listened until its connection was lost: the backoff starts over
            await asyncio.sleep(delay)

    async def _listen(self, dsn: str) -> None:
        """Until the connection is lost: each notification wakes its run's waiters."""
        connection = await asyncpg.connect(dsn, server_settings={"application_name": self._application_name})
        lost = asyncio.Event()
        try:
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(CHANNEL, self._notified)
            self._listening = True
            self._wake_all()  # what was decided while nobody listened is read now
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), CHECK_EVERY_S)
                if not lost.is_set():
                    await asyncio.wait_for(connection.fetchval("SELECT 1"), CHECK_EVERY_S)
            log.warning("the connection listening for decisions was lost")
        finally:
            self._listening = False
            with contextlib.suppress(Exception):
                await connection.close(timeout=1)

    def _notified(self, _connection: Any, _pid: int, _channel: str, run_id: str) -> None:
        watchers = self._watchers.get(run_id)
        if not watchers:
            if self.unwatched is not None:
                self.unwatched(run_id)
            return
        for woken in watchers:
            woken.set()

    def _wake_all(self) -> None:
        for watchers in self._watchers.values():
            for woken in watchers:
                woken.set()

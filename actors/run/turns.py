"""The runs one process owns (``Turns``): each driven by a task of its own once one of ``max_active_runs`` turns is
free, cancelled through its own event, and forgotten when its task ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from actors.run.context import Cancel, HandedOver, Interruption, Parked
from actors.run.driver import RunDriver
from actors.store.ownership import LeaseLost
from dag.plan import Plan
from dag.run_state import RunState

log = logging.getLogger(__name__)


class Turns:
    """The runs this process owns, by id: driven, or waiting for their turn."""

    def __init__(
        self, driver: RunDriver, *, max_active_runs: int, parked: Callable[[str, tuple[str, ...]], None]
    ) -> None:
        """``parked`` is told of each run that stopped being driven to wait for people (its id, what it waits
        on)."""
        self._driver = driver
        self._parked = parked
        self._runs: dict[str, asyncio.Task[Any]] = {}
        self._cancels: dict[str, Cancel] = {}
        self._claimed: set[str] = set()
        """Runs this process took and does not drive yet (created, woken): no orphans of this owner's scan."""
        self._turns = asyncio.Semaphore(max_active_runs)
        self._driving = 0

    @property
    def runs(self) -> Mapping[str, asyncio.Task[Any]]:
        """Each run owned here, and the task driving it."""
        return self._runs

    def owns(self, run_id: str) -> bool:
        """Whether ``run_id`` is owned here: driven, waiting for its turn, or claimed and about to be."""
        return run_id in self._runs or run_id in self._claimed

    def owned(self) -> set[str]:
        """Every run owned here (``owns``)."""
        return {*self._runs, *self._claimed}

    @contextmanager
    def claiming(self, run_id: str) -> Iterator[None]:
        """Hold ``run_id`` as owned here between taking it and starting its task."""
        self._claimed.add(run_id)
        try:
            yield
        finally:
            self._claimed.discard(run_id)

    def start(
        self,
        state: RunState,
        last_seq: int,
        recovered: tuple[str, str | None] | None = None,
        checked_plan: Plan | None = None,
    ) -> None:
        cancel = Cancel()
        task = asyncio.create_task(
            self._drive_in_turn(state, last_seq, cancel, recovered, checked_plan), name=f"run:{state.run_id}"
        )
        self._runs[state.run_id] = task
        self._cancels[state.run_id] = cancel
        task.add_done_callback(self._forget)

    def cancel(self, run_id: str, because: Interruption | None = None) -> None:
        """Cancel a run owned here: in-flight calls are cancelled and nothing more is dispatched; it stops for
        ``because`` (``None``: a cancel asked of it)."""
        self._cancels[run_id].stop(because)

    def cancel_all(self) -> None:
        for cancel in self._cancels.values():
            cancel.stop()

    def active(self) -> int:
        """Runs owned here: driven, or waiting for their turn."""
        return len(self._runs)

    def waiting(self) -> int:
        """Runs owned here that wait for a turn to be driven (``max_active_runs`` are)."""
        return len(self._runs) - self._driving

    async def _drive_in_turn(
        self,
        state: RunState,
        last_seq: int,
        cancel: Cancel,
        recovered: tuple[str, str | None] | None,
        checked_plan: Plan | None,
    ) -> RunState:
        """Drive the run once one of the ``max_active_runs`` turns is free. Owning more runs than it drives
        keeps the supervisor's loop (and its pool) short of work, so that a submission is answered within the
        API's deadline under any load; the runs waiting are owned and leased all the same. A run cancelled
        while it waits is driven at once, to record its cancellation; one waiting when the supervisor hands
        over is handed over as it is.

        An agent node's child run takes no turn of its own: its parent holds one while it waits for the child,
        so a tree of runs is driven in one turn (a child waiting for a turn its waiting parents hold would wait
        for ever once ``max_active_runs`` parents each waited for one)."""
        if state.parent is not None:
            return await self._drive(state, last_seq, cancel, recovered, checked_plan)
        turn = asyncio.ensure_future(self._turns.acquire())
        cancelled = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait({turn, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            turn.cancel()
            raise
        finally:
            cancelled.cancel()
        try:
            return await self._drive(state, last_seq, cancel, recovered, checked_plan)
        finally:
            if turn.done() and not turn.cancelled():
                self._turns.release()
            else:
                turn.cancel()

    async def _drive(
        self,
        state: RunState,
        last_seq: int,
        cancel: Cancel,
        recovered: tuple[str, str | None] | None,
        checked_plan: Plan | None,
    ) -> RunState:
        self._driving += 1
        try:
            if self._driver.handover.is_set() and not recovered:
                raise HandedOver(f"run {state.run_id} handed over before its turn came")
            return await self._driver.drive(
                state, last_seq=last_seq, cancel=cancel, recovered=recovered, checked_plan=checked_plan
            )
        finally:
            self._driving -= 1

    def _forget(self, task: asyncio.Task[Any]) -> None:
        run_id = task.get_name().removeprefix("run:")
        self._runs.pop(run_id, None)
        self._cancels.pop(run_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, Parked):
            log.debug("%s", error)
            self._parked(run_id, error.waits)
        elif isinstance(error, HandedOver):
            log.info("run %s handed over unfinished; it resumes under the next supervisor", run_id)
        elif isinstance(error, LeaseLost):
            log.warning("run %s was taken over by another supervisor: %s", run_id, error)
        elif error is not None:
            # The driver could not even record its failure (the store stayed down): the run stays live in
            # PostgreSQL, and its lease lapses so that a supervisor recovers it.
            log.error("run %s stopped without a terminal record", run_id, exc_info=error)

"""Why a round ended early (``Interruption``), a run's cancellation and its reason (``Cancel``), a run handed over
by a stopping supervisor (``HandedOver``), and a run parked on people (``Parked``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from dag.errors import RaydagError
from dag.states import StopReason


@dataclass(frozen=True)
class Interruption:
    """Why a round ended before its DAG drained."""

    reason: StopReason
    detail: str


CANCELLED = Interruption(StopReason.CANCELLED, "the run was cancelled")
"""A person's (or a client's) cancellation."""


class Cancel(asyncio.Event):
    """A run's cancellation, set once, with why: a cancel asked of it (``CANCELLED``), or its parent run's stop,
    whose reason a child run stops with (a parent out of budget stops its children with the budget's reason)."""

    def __init__(self) -> None:
        super().__init__()
        self.interruption = CANCELLED

    def stop(self, interruption: Interruption | None = None) -> None:
        """Cancel the run, for ``interruption`` (``None``: a cancel asked of it); the first reason stands."""
        if not self.is_set() and interruption is not None:
            self.interruption = interruption
        self.set()


class HandedOver(RaydagError):
    """The supervisor is shutting down: the run stops being driven here, unfinished and still owned, so that
    a supervisor of the same name (after a restart) or any other (once the lease lapses) resumes it."""


class Parked(RaydagError):
    """The run waits for people and for nothing else, and was recorded so (``RunParked``): it stops being
    driven, owned by nobody, until a decision about it or its first wait's deadline wakes it."""

    def __init__(self, run_id: str, waits: tuple[str, ...]) -> None:
        super().__init__(f"run {run_id} waits for people: {', '.join(waits)}")
        self.run_id = run_id
        self.waits = waits
        """What it waits on, as ``RunParked`` names it (``operation:<id>``, ``review:<round>``, …)."""

"""Every transition is applied in memory, then persisted, then adopted — in that order."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from pydantic import JsonValue

from actors.observe.metrics import NO_METRICS, RunMetrics, Transition, report
from actors.observe.tracing import tracer
from dag.events import RunEvent, RunFinished
from dag.run_state import RunState, apply
from dag.states import RunStatus, StopReason


class EventSink(Protocol):
    async def append(self, state: RunState, first_seq: int, events: Sequence[RunEvent]) -> None:
        """Persist ``events`` atomically, or raise; ``LeaseLost`` if the run is no longer this owner's."""
        ...


def now() -> datetime:
    return datetime.now(UTC)


class RunRecorder:
    """A run's state and its event cursor. Nothing acts on a transition before it is stored — metrics
    included: they count what was stored, and only what this recorder stored. ``state`` includes what was
    staged (``stage``), which is stored with the next ``record``."""

    def __init__(
        self, state: RunState, last_seq: int, sink: EventSink, metrics: RunMetrics = NO_METRICS
    ) -> None:
        self.last_seq = last_seq
        self._stored = state
        self._staged: list[Transition] = []
        self._staged_at: float | None = None
        """When (``time.monotonic()``) the oldest staged transition was staged."""
        self._sink = sink
        self._metrics = metrics
        self._lock = asyncio.Lock()  # a streamed plan records while its round executes

    def staged_for(self) -> float | None:
        """Seconds since the oldest transition not yet stored was staged; ``None`` if none waits."""
        return None if self._staged_at is None else time.monotonic() - self._staged_at

    @property
    def state(self) -> RunState:
        """What is stored, then what is staged on it."""
        return self._staged[-1][2] if self._staged else self._stored

    async def record(self, *events: RunEvent) -> None:
        """Apply ``events`` and store them, after whatever was staged, in one append; then adopt them."""
        if events:
            await self._store(events)

    async def flush(self) -> None:
        """Store what was staged, if anything: before this process lets the run go (a handover)."""
        await self._store(())

    async def _store(self, events: Sequence[RunEvent]) -> None:
        async with self._lock:
            if not events and not self._staged:
                return
            state = self.state
            transitions = list(self._staged)
            for event in events:
                after = apply(state, event)  # raises IllegalTransition before anything is written
                transitions.append((state, event, after))
                state = after
            written = [event for _, event, _ in transitions]
            attributes: dict[str, str | int] = {
                "raydag.run_id": state.run_id,
                "raydag.first_seq": self.last_seq + 1,
                "raydag.events": len(written),
            }
            try:
                with tracer().start_as_current_span("checkpoint", attributes=attributes):
                    await self._sink.append(state, self.last_seq + 1, written)
            finally:
                self._staged = []  # stored now, or gone down with this append
                self._staged_at = None
            self._stored = state
            self.last_seq += len(written)
            report(self._metrics, transitions)

    async def stage(self, *events: RunEvent) -> None:
        """Apply ``events`` now and store them with the next ``record``, ahead of its events.

        For transitions nothing acts on until a later one is recorded: a plan accepted is acted on only
        through the dispatches the next step records, so both are stored in one append. If no record
        follows (the process stops first), they are lost and nothing was done on them; a supervisor that
        resumes the run takes them again from the state it finds."""
        async with self._lock:
            state = self.state
            for event in events:
                after = apply(state, event)
                self._staged.append((state, event, after))
                state = after
            if events and self._staged_at is None:
                self._staged_at = time.monotonic()

    async def finish(
        self,
        status: RunStatus,
        reason: StopReason | None,
        detail: str | None,
        result: dict[str, JsonValue] | None = None,
    ) -> None:
        await self.record(
            RunFinished(at=now(), status=status, stop_reason=reason, detail=detail, result=result)
        )

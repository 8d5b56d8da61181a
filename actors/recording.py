"""Every transition is applied in memory, then persisted, then adopted — in that order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from pydantic import JsonValue

from actors.metrics import NO_METRICS, RunMetrics, Transition, report
from actors.tracing import tracer
from dag.errors import RaydagError
from dag.events import RunEvent, RunFinished
from dag.run_state import RunState, apply
from dag.states import RunStatus, StopReason


class LeaseLost(RaydagError):
    """Another supervisor owns the run now; this one must stop driving it (and record nothing more)."""


class EventSink(Protocol):
    async def append(self, state: RunState, first_seq: int, events: Sequence[RunEvent]) -> None:
        """Persist ``events`` atomically, or raise; ``LeaseLost`` if the run is no longer this owner's."""
        ...


def now() -> datetime:
    return datetime.now(UTC)


class RunRecorder:
    """A run's state and its event cursor. Nothing acts on a transition before it is stored — metrics
    included: they count what was stored, and only what this recorder stored."""

    def __init__(
        self, state: RunState, last_seq: int, sink: EventSink, metrics: RunMetrics = NO_METRICS
    ) -> None:
        self.state = state
        self.last_seq = last_seq
        self._sink = sink
        self._metrics = metrics
        self._lock = asyncio.Lock()  # a streamed plan records while its round executes

    async def record(self, *events: RunEvent) -> None:
        if not events:
            return
        async with self._lock:
            state = self.state
            transitions: list[Transition] = []
            for event in events:
                after = apply(state, event)  # raises IllegalTransition before anything is written
                transitions.append((state, event, after))
                state = after
            attributes: dict[str, str | int] = {
                "raydag.run_id": state.run_id,
                "raydag.first_seq": self.last_seq + 1,
                "raydag.events": len(events),
            }
            with tracer().start_as_current_span("checkpoint", attributes=attributes):
                await self._sink.append(state, self.last_seq + 1, events)
            self.state = state
            self.last_seq += len(events)
            report(self._metrics, transitions)

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

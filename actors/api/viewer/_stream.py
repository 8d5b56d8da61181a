"""A run's events as server-sent events, read from PostgreSQL by polling.

Polling, not LISTEN/NOTIFY: a listener holds one pooled connection per open stream for its whole life
(pools hold 4), and the writers would have to NOTIFY in every append. A poll borrows a connection for one
indexed single-row read and reads events only when ``last_seq`` moved.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from actors.api.views import as_json, event_view
from actors.store.resilience import REQUEST_DEADLINE_S, DatabaseUnavailable, deadline
from actors.store.runs import RunStore
from dag.events import RunFinished
from dag.policy import Principal


@dataclass(frozen=True)
class StreamLimits:
    """How often a stream looks for new events, how long it may stay open, and when it says it is alive."""

    poll_s: float = 0.25
    max_duration_s: float = 300.0
    heartbeat_s: float = 15.0
    retry_ms: int = 1000
    """What the client should wait before reconnecting (with ``Last-Event-ID``) after the stream ends early."""


def sse_message(event: dict[str, Any]) -> str:
    """One event as one SSE message; JSON never contains a raw newline, so ``data`` is a single line."""
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event['seq']}\nevent: {event['kind']}\ndata: {data}\n\n"


async def run_event_stream(
    store: Callable[[], RunStore], principal: Principal, run_id: str, after: int, limits: StreamLimits
) -> AsyncIterator[str]:
    """The run's events after seq ``after``, as they are recorded; ends after ``run_finished``, when the run
    becomes unreadable (retention), when the database is unreachable, or after ``limits.max_duration_s``."""
    yield f"retry: {limits.retry_ms}\n\n"
    ends_at = time.monotonic() + limits.max_duration_s
    last_write = time.monotonic()
    seen = after
    try:
        while time.monotonic() < ends_at:
            # Each poll has a request's budget for the database of its own: the stream itself lasts minutes.
            with deadline(REQUEST_DEADLINE_S):
                row = await store().run_row(principal, run_id)
                if row is None or row["pruned_at"] is not None:
                    return
                batch = await store().events(run_id, after=seen) if row["last_seq"] > seen else []
            for stored in batch:
                yield sse_message(as_json(event_view(stored)))
                seen = stored.seq
                if isinstance(stored.event, RunFinished):
                    return
            if batch:
                last_write = time.monotonic()
            elif row["finished_at"] is not None:
                return  # the client already has every event, run_finished included
            elif time.monotonic() - last_write >= limits.heartbeat_s:
                yield ": keep-alive\n\n"
                last_write = time.monotonic()
            await asyncio.sleep(limits.poll_s)
    except DatabaseUnavailable:
        return  # the client reconnects after ``retry`` and resumes from its last event id

"""How calls travel between the supervisor and its ``ToolCaller`` actors: how many are in flight, how an
exchange is packed, and the outcome of a call whose worker failed. No Ray at import (``pack`` loads
cloudpickle when it runs)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime
from typing import Any

from actors.calls.call import ToolOutcome
from dag.events import ErrorKind, NodeError, RuntimeFailure

EXCHANGES_PER_CALLER = 1000
"""Exchanges a caller holds at once (``CallerPoolExecutor``): cheap waits, one or two per run stepping."""


def worker_failed(started: datetime, exc: BaseException) -> ToolOutcome:
    """The process making the call died or the call could not run: its effect is unknown, retry may help."""
    return ToolOutcome(
        output=None,
        error=NodeError(
            kind=ErrorKind.TRANSIENT, code=RuntimeFailure.WORKER_FAILED, message=type(exc).__name__
        ),
        started_at=started,
        finished_at=datetime.now(UTC),
    )


CALLS_IN_FLIGHT = 64
"""How many calls a supervisor's callers make at once, together (shared evenly among them); more wait in
their queues. It stays under the MCP server's per-tenant limit (128 in flight per replica): past it the
server answers 429, the calls are retried, and under heavy load runs fail on it (docs/BENCHMARKS.md)."""


DEFAULT_CALLERS = 1
"""``RAYDAG_TOOL_CALLERS``' default. One caller makes a supervisor's calls at ~0.8 ms of CPU each, far from
filling its core; a second process costs more CPU per call than it saves waiting (docs/BENCHMARKS.md, "One
caller or two")."""


def calls_per_caller(callers: int) -> int:
    """Each of ``callers`` callers' share of ``CALLS_IN_FLIGHT`` (rounded down, so the shares never add up to
    more; at least one)."""
    return max(1, CALLS_IN_FLIGHT // callers)


def pack(value: Any) -> bytes:
    """An exchange's arguments, or its answer, as one ``bytes`` (``ToolCaller.packed_exchange``), pickled as
    Ray pickles arguments: a class defined where it cannot be imported travels by value."""
    from ray import cloudpickle

    packed: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[no-untyped-call]
    return packed


def unpack(packed: bytes) -> Any:
    """What ``pack`` packed (plain ``pickle`` reads what cloudpickle wrote)."""
    return pickle.loads(packed)

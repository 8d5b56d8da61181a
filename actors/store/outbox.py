"""The outbox relay: delivers each event at least once, each run's in order, then marks it delivered.

What the outbox holds: a run's end (``run.finished``), each wait for people it starts (``run.waiting``), and
each decision a person or a deadline makes (``decision.decided``), each written in the transaction of what it
tells. Delivery happens before marking, so a crash between the two delivers again; every event carries a
stable ``event_id`` that receivers use to de-duplicate. A run's events go out in the order they were written
(``seq``), one after the other: a relay takes only the oldest undelivered event of each run, and an event not
delivered holds back the run's later ones (never another run's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import asyncpg
import httpx

log = logging.getLogger(__name__)


class OutboxSink(Protocol):
    """Where outbox events go. ``deliver`` returns when the event is safely received, else raises."""

    async def deliver(self, event: Mapping[str, Any]) -> None: ...


class LogSink:
    """The default sink: one JSON line per event on the ``raydag.outbox`` logger."""

    def __init__(self) -> None:
        self._log = logging.getLogger("raydag.outbox")

    async def deliver(self, event: Mapping[str, Any]) -> None:
        self._log.info("%s", json.dumps(event, ensure_ascii=False, sort_keys=True))


class WebhookSink:
    """POSTs each event as JSON; any 2xx is a delivery. ``Idempotency-Key`` carries the event id."""

    def __init__(self, url: str, *, timeout_s: float = 10.0) -> None:
        self._url = url
        self._timeout_s = timeout_s

    async def deliver(self, event: Mapping[str, Any]) -> None:
        async with httpx.AsyncClient(timeout=self._timeout_s) as client:
            response = await client.post(
                self._url, json=dict(event), headers={"Idempotency-Key": event["event_id"]}
            )
            response.raise_for_status()


class OutboxRelay:
    """Moves undelivered outbox rows to a sink. Several relays may run: rows are locked while delivered."""

    def __init__(self, pool: asyncpg.Pool, sink: OutboxSink, *, batch: int = 50) -> None:
        self._pool = pool
        self._sink = sink
        self._batch = batch

    async def relay_once(self) -> int:
        """Deliver what is pending now, each run's in order; return how many events were delivered and marked."""
        delivered = 0
        held: set[str] = set()
        """Runs whose oldest event failed this time: nothing later of theirs goes before it."""
        while delivered < self._batch:
            moved = await self._relay_heads(held, self._batch - delivered)
            if moved == 0:
                return delivered
            delivered += moved
        return delivered

    async def _relay_heads(self, held: set[str], limit: int) -> int:
        """Deliver the oldest undelivered event of each run (locked: another relay takes other runs' heads),
        but those of ``held`` runs; a failure holds its run for this pass. How many were delivered."""
        delivered = 0
        async with self._pool.acquire() as connection, connection.transaction():
            rows = await connection.fetch(
                """SELECT event_id, run_id, payload FROM outbox AS head
                   WHERE delivered_at IS NULL AND NOT (run_id::text = ANY($2::text[]))
                     AND NOT EXISTS (SELECT 1 FROM outbox AS earlier
                                     WHERE earlier.run_id = head.run_id AND earlier.delivered_at IS NULL
                                       AND earlier.seq < head.seq)
                   ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED""",
                limit,
                sorted(held),
            )
            for row in rows:
                try:
                    await self._sink.deliver(row["payload"])
                except Exception as exc:  # one failing event must not stop other runs'
                    log.warning("outbox event %s not delivered: %s", row["event_id"], type(exc).__name__)
                    held.add(str(row["run_id"]))
                    await connection.execute(
                        "UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE event_id = $1",
                        row["event_id"],
                        type(exc).__name__,
                    )
                    continue
                await connection.execute(
                    "UPDATE outbox SET attempts = attempts + 1, delivered_at = now() WHERE event_id = $1",
                    row["event_id"],
                )
                delivered += 1
        return delivered

"""The outbox relay: delivers each terminal event at least once, then marks it delivered.

Delivery happens before marking, so a crash between the two delivers again; every event carries a stable
``event_id`` that receivers use to de-duplicate.
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
        """Deliver what is pending now; return how many events were delivered and marked."""
        delivered = 0
        async with self._pool.acquire() as connection, connection.transaction():
            rows = await connection.fetch(
                """SELECT event_id, payload FROM outbox WHERE delivered_at IS NULL
                   ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED""",
                self._batch,
            )
            for row in rows:
                try:
                    await self._sink.deliver(row["payload"])
                except Exception as exc:  # one failing event must not stop the others
                    log.warning("outbox event %s not delivered: %s", row["event_id"], type(exc).__name__)
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

"""Retention: the events of old finished runs are removed; each run's summary and result are kept."""

from __future__ import annotations

import re
from datetime import timedelta

import asyncpg

_DURATION = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w``."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration like 30d, 12h, 15m, 90s or 2w")
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


async def prune(pool: asyncpg.Pool, older_than: timedelta) -> tuple[int, int]:
    """Delete the events of runs that finished more than ``older_than`` ago; return (runs, events)."""
    async with pool.acquire() as connection, connection.transaction():
        runs = await connection.fetch(
            """UPDATE runs SET pruned_at = now()
               WHERE finished_at < now() - $1::interval AND pruned_at IS NULL
               RETURNING run_id""",
            older_than,
        )
        keys = [row["run_id"] for row in runs]
        deleted = await connection.execute("DELETE FROM run_events WHERE run_id = ANY($1::uuid[])", keys)
    return len(keys), int(deleted.split()[-1])

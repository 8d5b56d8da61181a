"""A database made ready for the runtime: raydag's migrations applied, then those of a toolset raydag hosts
(its own tables, recorded apart), then that toolset's seed if one is asked for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg

from actors.store.database import create_pool
from actors.store.migrate import Schema, migrate

Seeding = Callable[[asyncpg.Connection], Awaitable[Any]]
"""Loads data over a connection whose migrations are applied (``HostedToolset.seed`` bound to its file)."""


async def prepare_database(
    dsn: str, *, schemas: Sequence[Schema] = (), seed: Seeding | None = None
) -> list[int]:
    """Apply raydag's pending migrations, then each of ``schemas`` (a hosted toolset's own), then ``seed``.
    Returns raydag's versions applied now. A database used only with toolsets served elsewhere never gets a
    hosted toolset's tables."""
    pool = await create_pool(dsn, max_size=1)
    try:
        async with pool.acquire() as connection:
            applied = await migrate(connection)
            for schema in schemas:
                await migrate(connection, schema)
            if seed is not None:
                await seed(connection)
        return applied
    finally:
        await pool.close()

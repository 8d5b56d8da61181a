"""A database made ready for the runtime: its migrations applied, and a toolset's own tables and seed where
this process serves that toolset."""

from __future__ import annotations

from actors.store.database import create_pool
from actors.store.migrate import Schema, migrate
from mcp_server.seed import SeedData, load_seed

CASEOPS_SCHEMA = Schema("mcp_server", table="caseops_schema_migrations")
"""The shipped caseops server's own tables (mcp_server/migrations), in the database it shares with the runtime."""


async def prepare_database(
    dsn: str, seed: SeedData | None = None, *, caseops: bool | None = None
) -> list[int]:
    """Apply the runtime's pending migrations and, where this process serves caseops (``caseops``, implied by
    a ``seed``, which is caseops data), caseops' own; then load ``seed``. Returns the runtime's versions
    applied now. A database used only with other toolsets never gets caseops' tables."""
    pool = await create_pool(dsn, max_size=1)
    try:
        async with pool.acquire() as connection:
            applied = await migrate(connection)
            if (seed is not None) if caseops is None else caseops:
                await migrate(connection, CASEOPS_SCHEMA)
            if seed is not None:
                await load_seed(connection, seed)
        return applied
    finally:
        await pool.close()

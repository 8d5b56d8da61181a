"""Versioned SQL migrations, applied in order, each recorded once in its schema's table (the runtime's is
``schema_migrations``; a tool server sharing the database keeps its own)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_LOCK_ID = 0x7261796461670001  # "raydag" + 1: serializes migrators across processes
_TABLE = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True)
class Schema:
    """A set of migrations (``NNNN_name.sql`` files in ``package``'s ``folder``) and the table that records
    which were applied: the runtime's own, or a tool server's that keeps its tables in the same database."""

    package: str
    folder: str = "migrations"
    table: str = "schema_migrations"


RUNTIME = Schema("actors.store")
"""The runtime's tables: runs, events, ledger, leases, outbox. (0001 moved out: it was caseops' tables.)"""


def migrations(schema: Schema = RUNTIME) -> list[Migration]:
    """The packaged migrations of ``schema``, ordered by version."""
    found = []
    for entry in resources.files(schema.package).joinpath(schema.folder).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations of {schema.package} share a version: {versions}")
    return found


async def migrate(connection: asyncpg.Connection, schema: Schema = RUNTIME) -> list[int]:
    """Apply every migration of ``schema`` not yet recorded; return the versions applied now."""
    if not _TABLE.match(schema.table):
        raise ValueError(f"not a plain table name: {schema.table!r}")
    applied_now: list[int] = []
    async with connection.transaction():
        # One lock for every schema: two servers migrating one database never interleave their DDL.
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
        await connection.execute(
            f"""
            CREATE TABLE IF NOT EXISTS {schema.table} (
                version     integer PRIMARY KEY,
                name        text NOT NULL,
                applied_at  timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        done = {row["version"] for row in await connection.fetch(f"SELECT version FROM {schema.table}")}
        for migration in migrations(schema):
            if migration.version in done:
                continue
            await connection.execute(migration.sql)
            await connection.execute(
                f"INSERT INTO {schema.table} (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            applied_now.append(migration.version)
    return applied_now

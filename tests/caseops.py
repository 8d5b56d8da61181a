"""The worked example's database, as tests and benchmarks prepare it: raydag's migrations, caseops' own (as
its ``hosting`` in ``mcp_server/caseops.yaml`` declares them) and, by default, its demo seed."""

from __future__ import annotations

import asyncpg

from actors.launch.hosting import HostedToolset, hosted
from actors.store.migrate import Schema
from actors.store.setup import prepare_database
from actors.toolsets.config import shipped_toolsets
from mcp_server.seed import SeedData, demo_seed, load_seed

_DEMO = object()


def caseops_hosting() -> HostedToolset:
    toolsets = hosted(shipped_toolsets("http://127.0.0.1/mcp"))
    assert toolsets is not None
    return toolsets


CASEOPS_SCHEMA: Schema = caseops_hosting().schemas[0]
"""caseops' own tables (mcp_server/migrations), recorded in their own migrations table."""


async def prepare_caseops_database(dsn: str, seed: SeedData | object | None = _DEMO) -> list[int]:
    """raydag's migrations and caseops', then ``seed`` (the demo fixture unless ``None`` is given)."""
    data = demo_seed() if seed is _DEMO else seed

    async def loaded(connection: asyncpg.Connection) -> None:
        if isinstance(data, SeedData):
            await load_seed(connection, data)

    return await prepare_database(dsn, schemas=(CASEOPS_SCHEMA,), seed=loaded)

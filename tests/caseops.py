"""The worked example's database, as tests and benchmarks prepare it: raydag's migrations, caseops' own (as
its ``hosting`` in ``mcp_server/caseops.yaml`` declares them) and, by default, its demo seed."""

from __future__ import annotations

import uuid

import asyncpg

from actors.launch.hosting import HostedToolset, hosted
from actors.launch.settings import shipped_toolsets
from actors.store.migrate import Schema
from actors.store.setup import prepare_database
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


MISSING_A_CERTIFICATE = "C-103"
"""The demo case whose accident certificate is missing: a run of stage ``act`` over it asks to send a request."""


async def copy_case(*dsns: str, case_id: str = MISSING_A_CERTIFICATE, tenant_id: str = "tenant-demo") -> str:
    """A new case of ``tenant_id``, as ``case_id`` is (its documents aside: it must have none), in each database
    of ``dsns`` (the tool server's, and a supervisor's that checks which cases are the tenant's): its id.

    A request to send documents is one business intent per case across runs (docs/EFFECTS.md): a test that
    needs a send of its own, not one an earlier test already made, needs a case of its own."""
    copy = f"{case_id}-{uuid.uuid4().hex[:8]}"
    for dsn in dict.fromkeys(dsns):
        connection = await asyncpg.connect(dsn)
        try:
            documents = await connection.fetchval(
                "SELECT count(*) FROM source_documents WHERE tenant_id = $1 AND case_id = $2",
                tenant_id,
                case_id,
            )
            assert documents == 0, f"{case_id} has documents, which a copy would not have"
            copied = await connection.execute(
                """INSERT INTO cases (tenant_id, case_id, version, status, policy_id, policy_version, submitted_at,
                                      submitted_at_offset_minutes, received_document_codes)
                   SELECT tenant_id, $3, version, status, policy_id, policy_version, submitted_at,
                          submitted_at_offset_minutes, received_document_codes
                   FROM cases WHERE tenant_id = $1 AND case_id = $2""",
                tenant_id,
                case_id,
                copy,
            )
            assert copied != "INSERT 0 0", f"{case_id} is no case of {tenant_id}"
        finally:
            await connection.close()
    return copy

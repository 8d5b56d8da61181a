"""PostgreSQL storage: migrations, the seed loader, timestamps with offsets, and the event log's shape."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime

import asyncpg
import pytest

from actors.runtime import prepare_database
from actors.store.database import create_pool
from actors.store.migrate import migrations
from actors.store.runs import RunStore
from actors.store.seed import SeedData, demo_seed, load_seed

TABLES = ("tenants", "policies", "policy_required_documents", "cases", "source_documents", "document_aliases")


async def counts(connection: asyncpg.Connection) -> dict[str, int]:
    return {table: await connection.fetchval(f"SELECT count(*) FROM {table}") for table in TABLES}


async def test_every_migration_is_recorded_once_and_a_second_start_applies_nothing(dsn: str) -> None:
    assert await prepare_database(dsn) == []

    connection = await asyncpg.connect(dsn)
    try:
        recorded = await connection.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
    finally:
        await connection.close()
    assert [(row["version"], row["name"]) for row in recorded] == [(m.version, m.name) for m in migrations()]


async def test_concurrent_starts_migrate_without_conflict(dsn: str) -> None:
    assert await asyncio.gather(*(prepare_database(dsn) for _ in range(4))) == [[], [], [], []]


async def test_loading_the_same_seed_twice_changes_nothing(dsn: str) -> None:
    pool = await create_pool(dsn, max_size=1)
    try:
        async with pool.acquire() as connection:
            before = await counts(connection)
            await load_seed(connection, demo_seed())
            after = await counts(connection)
    finally:
        await pool.close()

    assert before == after
    assert after["cases"] >= len(demo_seed().cases)  # other tests may add cases of their own


async def test_a_reseed_updates_rows_in_place(dsn: str) -> None:
    seed = demo_seed()
    tenant = seed.tenants[0]
    renamed = SeedData(tenants=[tenant.model_copy(update={"name": "Renamed Insurance"})])
    pool = await create_pool(dsn, max_size=1)
    try:
        async with pool.acquire() as connection:
            await load_seed(connection, renamed)
            name = await connection.fetchval(
                "SELECT name FROM tenants WHERE tenant_id = $1", tenant.tenant_id
            )
            await load_seed(connection, SeedData(tenants=[tenant]))
    finally:
        await pool.close()

    assert name == "Renamed Insurance"


async def test_timestamps_keep_the_offset_they_were_written_with(dsn: str) -> None:
    from mcp_server.caseops import CaseopsRepository

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        snapshot = await CaseopsRepository(pool).case_snapshot("tenant-demo", "C-102")
        other = await CaseopsRepository(pool).case_snapshot("tenant-other", "C-201")
    finally:
        await pool.close()

    assert snapshot.submitted_at.isoformat() == "2026-07-18T09:30:00+08:00"
    assert other.submitted_at.isoformat() == "2026-08-03T12:00:00+01:00"


def test_a_seed_with_a_naive_timestamp_is_rejected_before_touching_the_database() -> None:
    raw = json.loads(demo_seed().model_dump_json())
    raw["cases"][0]["submitted_at"] = "2026-07-18T09:30:00"

    with pytest.raises(ValueError, match="timezone"):
        SeedData.model_validate(raw)


async def test_an_unparseable_rule_version_is_refused_by_the_schema(dsn: str) -> None:
    connection = await asyncpg.connect(dsn)
    try:
        with pytest.raises(asyncpg.CheckViolationError):
            await connection.execute(
                """INSERT INTO document_aliases VALUES ('tenant-demo', 'x', 'Y', 'v2026', 1.0, true)"""
            )
    finally:
        await connection.close()


async def test_a_runs_events_are_contiguous_and_the_summary_points_at_the_last(
    supervisor: object, store: RunStore
) -> None:
    from actors.service import RunRequest
    from dag.policy import Principal
    from mcp_server.contracts import ALL_SCOPES

    submitted = await supervisor.submit.remote(  # type: ignore[attr-defined]
        RunRequest(principal=Principal("tenant-demo", "test", frozenset(ALL_SCOPES)), case_id="C-104")
    )
    assert await supervisor.wait.remote(submitted.run_id, 60.0)  # type: ignore[attr-defined]

    events = await store.events(submitted.run_id)
    row = await store.run_row(Principal("tenant-demo", "test", frozenset(ALL_SCOPES)), submitted.run_id)
    assert row is not None
    assert [stored.seq for stored in events] == list(range(1, len(events) + 1))
    assert row["last_seq"] == len(events)
    assert row["status"] == events[-1].event.status == "completed"  # type: ignore[union-attr]
    recorded = [stored.recorded_at for stored in events]
    assert recorded == sorted(recorded)
    assert isinstance(recorded[0], datetime)

    tail = await store.events(submitted.run_id, after=len(events) - 2)
    assert [stored.seq for stored in tail] == [len(events) - 1, len(events)]
    assert await store.events(submitted.run_id, after=len(events)) == []


async def test_reads_ride_out_pooled_connections_terminated_while_idle(dsn: str) -> None:
    """A failover or an operator's pg_terminate_backend kills idle pooled connections; asyncpg then fails the
    next statement on some of them with ConnectionDoesNotExistError and on others with InternalClientError
    ("cannot switch to state …", MagicStack/asyncpg#1069). Both must be retried, never reach a caller."""
    import uuid

    name = f"raydag-test-terminated-{uuid.uuid4().hex[:8]}"
    failures: list[str] = []
    for _ in range(30):  # each round fails ~15 % of the time without the retry (measured here)
        pool = await create_pool(dsn, max_size=4, application_name=name)
        try:
            await asyncio.gather(*(pool.fetchval("SELECT pg_sleep(0.01)") for _ in range(8)))  # 4 open
            admin = await asyncpg.connect(dsn)
            try:
                terminated = await admin.fetchval(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                    name,
                )
            finally:
                await admin.close()
            assert terminated == 4
            store = RunStore(pool)
            for _ in range(3):
                try:
                    assert await store.run_status(str(uuid.uuid4())) is None
                except Exception as exc:
                    failures.append(type(exc).__name__)
        finally:
            pool.terminate()

    assert failures == []

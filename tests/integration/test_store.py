"""PostgreSQL storage: migrations, the seed loader, timestamps with offsets, and the event log's shape."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg
import pytest

from actors.api.views import run_view
from actors.store.database import create_pool, drop_database, ensure_database, with_database
from actors.store.migrate import migrations
from actors.store.runs import RunStore, StoredEvent
from actors.store.setup import prepare_database
from dag.budget import Budgets
from dag.events import ParentLink, RunCreated
from dag.policy import Principal
from mcp_server.seed import SeedData, demo_seed, load_seed
from tests.caseops import CASEOPS_SCHEMA, prepare_caseops_database

TABLES = ("tenants", "policies", "policy_required_documents", "cases", "source_documents", "document_aliases")


async def counts(connection: asyncpg.Connection) -> dict[str, int]:
    return {table: await connection.fetchval(f"SELECT count(*) FROM {table}") for table in TABLES}


@contextlib.asynccontextmanager
async def empty_database(admin_dsn: str) -> AsyncIterator[str]:
    """A database of the test's own, with nothing in it; dropped afterwards."""
    name = f"raydag_empty_{uuid.uuid4().hex[:8]}"
    await ensure_database(admin_dsn, name)
    try:
        yield with_database(admin_dsn, name)
    finally:
        await drop_database(admin_dsn, name)


async def test_every_migration_is_recorded_once_and_a_second_start_applies_nothing(dsn: str) -> None:
    assert await prepare_database(dsn) == []

    connection = await asyncpg.connect(dsn)
    try:
        recorded = await connection.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
    finally:
        await connection.close()
    assert [(row["version"], row["name"]) for row in recorded] == [(m.version, m.name) for m in migrations()]


async def test_four_concurrent_starts_on_an_empty_database_apply_each_migration_exactly_once(
    admin_dsn: str,
) -> None:
    async with empty_database(admin_dsn) as fresh:
        applied = await asyncio.gather(*(prepare_caseops_database(fresh, None) for _ in range(4)))
        connection = await asyncpg.connect(fresh)
        try:
            recorded = await connection.fetch("SELECT version FROM schema_migrations ORDER BY version")
            caseops = await connection.fetch(f"SELECT version FROM {CASEOPS_SCHEMA.table}")
            tables = await connection.fetchval(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = ANY($1)", TABLES
            )
        finally:
            await connection.close()

    versions = [migration.version for migration in migrations()]
    assert sorted(version for started in applied for version in started) == versions  # each once in all
    assert [row["version"] for row in recorded] == versions
    assert [row["version"] for row in caseops] == [m.version for m in migrations(CASEOPS_SCHEMA)]
    assert tables == len(TABLES)


async def test_a_database_for_other_toolsets_gets_no_caseops_tables_and_caseops_records_its_own(
    admin_dsn: str,
) -> None:
    async with empty_database(admin_dsn) as fresh:
        await prepare_database(fresh)
        connection = await asyncpg.connect(fresh)
        try:
            assert await connection.fetchval("SELECT to_regclass('cases')") is None
            assert await connection.fetchval("SELECT to_regclass('runs')") is not None
            await prepare_caseops_database(fresh, None)
            caseops = await connection.fetch(f"SELECT version FROM {CASEOPS_SCHEMA.table} ORDER BY version")
            runtime = await connection.fetch("SELECT version FROM schema_migrations ORDER BY version")
        finally:
            await connection.close()
    assert [row["version"] for row in caseops] == [m.version for m in migrations(CASEOPS_SCHEMA)]
    assert [row["version"] for row in runtime] == [m.version for m in migrations()]


async def test_a_database_from_before_caseops_kept_its_own_schema_keeps_its_data(admin_dsn: str) -> None:
    """Until the split, caseops' tables were the runtime's migration 0001 ("domain")."""
    async with empty_database(admin_dsn) as old:
        connection = await asyncpg.connect(old)
        try:
            await connection.execute(
                "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            await connection.execute(migrations(CASEOPS_SCHEMA)[0].sql)
            await connection.execute("INSERT INTO schema_migrations (version, name) VALUES (1, 'domain')")
            await load_seed(connection, demo_seed())
            before = await counts(connection)
            await prepare_caseops_database(old, None)
            after = await counts(connection)
            caseops = await connection.fetchval(f"SELECT array_agg(version) FROM {CASEOPS_SCHEMA.table}")
        finally:
            await connection.close()
    assert before["cases"] > 0
    assert after == before
    assert caseops == [migration.version for migration in migrations(CASEOPS_SCHEMA)]  # 0001 taken as applied


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
    from actors.run.submission import RunRequest
    from mcp_server.contracts import ALL_SCOPES

    submitted = await supervisor.submit.remote(  # type: ignore[attr-defined]
        RunRequest(
            principal=Principal("tenant-demo", "test", frozenset(ALL_SCOPES)), resource={"case_id": "C-104"}
        )
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


async def test_runs_stored_under_the_case_only_schema_carry_their_case_over_as_their_resource(
    admin_dsn: str,
) -> None:
    async with empty_database(admin_dsn) as old:
        row, events = await _migrated_old_run(old)

    assert row is not None
    assert run_view(row).resource == {"case_id": "C-102"}
    assert run_view(row).case_id == "C-102"
    assert events[0].event.resource == {"case_id": "C-102"}


async def _migrated_old_run(old: str) -> tuple[dict[str, Any] | None, list[StoredEvent]]:
    """Store a run the way a deployment before 0006 did, migrate, and read it back."""
    run_id = uuid.uuid4()
    connection = await asyncpg.connect(old)
    try:
        # A deployment from before 0006: its migrations applied, one finished run stored in their shape.
        await connection.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in migrations():
            if migration.version < 6:
                await connection.execute(migration.sql)
                await connection.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
        created = {
            "kind": "run_created",
            "at": "2026-07-18T09:30:00+00:00",
            "run_id": str(run_id),
            "tenant_id": "tenant-demo",
            "subject": "test",
            "scopes": ["cases:read"],
            "case_id": "C-102",
            "goal": "g",
            "planner": "conformance",
            "budgets": {},
        }
        await connection.execute(
            """INSERT INTO runs (run_id, tenant_id, subject, scopes, case_id, goal, planner, status, request_hash,
                                 last_seq, created_at, updated_at, finished_at)
               VALUES ($1, 'tenant-demo', 'test', '{cases:read}', 'C-102', 'g', 'conformance', 'failed', 'h',
                       1, now(), now(), now())""",
            run_id,
        )
        await connection.execute(
            "INSERT INTO run_events (run_id, seq, kind, data) VALUES ($1, 1, 'run_created', $2::jsonb)",
            run_id,
            json.dumps(created),
        )
    finally:
        await connection.close()
    assert await prepare_database(old) == [
        migration.version for migration in migrations() if migration.version >= 6
    ]
    pool = await create_pool(old, max_size=1)
    try:
        reader = Principal("tenant-demo", "test", frozenset({"cases:read"}))
        row = await RunStore(pool).run_row(reader, str(run_id))
        events = await RunStore(pool).events(str(run_id))
        async with pool.acquire() as checking:
            with pytest.raises(asyncpg.CheckViolationError):  # the two columns cannot disagree
                await checking.execute("UPDATE runs SET case_id = 'C-999' WHERE run_id = $1", run_id)
    finally:
        await pool.close()
    return row, events


def _created(*, goal: str, resource: dict[str, str] | None = None) -> RunCreated:
    """A run's first event, as a supervisor records it for a run of tenant-demo."""
    return RunCreated(
        at=datetime.now().astimezone(),
        run_id=str(uuid.uuid4()),
        tenant_id="tenant-demo",
        subject="test",
        scopes=(),
        resource=resource or {},
        goal=goal,
        planner="outputs",
        budgets=Budgets(),
    )


async def test_an_orphan_is_claimed_only_by_an_owner_serving_every_tool_it_was_offered(
    admin_dsn: str,
) -> None:
    from actors.store.ownership import Leases

    async with empty_database(admin_dsn) as fresh:
        await prepare_caseops_database(fresh)
        pool = await create_pool(fresh, max_size=2)
        try:
            gone = RunStore(pool, owner="gone", lease_s=0.0)  # its leases have lapsed as soon as written
            offered: dict[str, list[str] | None] = {"old": None, "narrow": ["a"], "wide": ["a", "b"]}
            runs = {}
            for label, tools in offered.items():
                created = _created(goal=label)
                _, runs[label] = await gone.create_run(
                    created, idempotency_key=None, request_hash=label, tools=tools
                )
            claimed = await Leases(pool, "serves-a", 15.0).claim_orphans(driving=[], serving=["a", "c"])
            rest = await Leases(pool, "serves-all", 15.0).claim_orphans(driving=[], serving=["a", "b"])
        finally:
            await pool.close()

    # A run stored before runs kept their tools is anyone's, as it was.
    assert {claim.run_id for claim in claimed} == {runs["old"], runs["narrow"]}
    assert [claim.run_id for claim in rest] == [runs["wide"]]


async def test_an_orphan_or_a_parked_run_is_claimed_only_by_an_owner_offering_its_planner(
    admin_dsn: str,
) -> None:
    """A supervisor without a run's planner could not drive it (it would fail the run): it leaves it to one
    that has it — a run it would adopt, or a parked one a decision wakes."""
    from actors.store.ownership import Leases

    async with empty_database(admin_dsn) as fresh:
        await prepare_caseops_database(fresh)
        pool = await create_pool(fresh, max_size=2)
        try:
            gone = RunStore(pool, owner="gone", lease_s=0.0)
            _, orphan = await gone.create_run(_created(goal="orphan"), idempotency_key=None, request_hash="o")
            _, parked = await gone.create_run(_created(goal="parked"), idempotency_key=None, request_hash="p")
            await pool.execute("UPDATE runs SET parked_until = now() WHERE run_id = $1", uuid.UUID(parked))
            other = Leases(pool, "plans-otherwise", 15.0)
            refused = await other.claim_orphans(driving=[], planning=["conformance"])
            refused_parked = await other.claim_parked(parked, planning=["conformance"])
            able = Leases(pool, "plans-outputs", 15.0)
            claimed = await able.claim_orphans(driving=[parked], planning=["outputs", "conformance"])
            claimed_parked = await able.claim_parked(parked, planning=["outputs"])
        finally:
            await pool.close()

    assert (refused, refused_parked) == ([], False)
    assert [claim.run_id for claim in claimed] == [orphan]
    assert claimed_parked is True


async def test_a_childs_end_marks_its_parked_parent_due_for_any_supervisor_and_notifies(
    admin_dsn: str,
) -> None:
    """A parent parked on its child is nobody's: the child's end, whoever records it, makes the parent's row due
    (the orphan scan of any supervisor claims it, should the notification be missed) and notifies its id."""
    from actors.store.decisions import CHANNEL
    from actors.store.ownership import Leases

    async with empty_database(admin_dsn) as fresh:
        await prepare_caseops_database(fresh)
        pool = await create_pool(fresh, max_size=2)
        listener = await asyncpg.connect(fresh)
        heard: list[str] = []
        try:
            await listener.add_listener(CHANNEL, lambda *notice: heard.append(notice[-1]))
            store = RunStore(pool, owner="gone", lease_s=15.0)
            _, parent = await store.create_run(
                _created(goal="parent"), idempotency_key=None, request_hash="p"
            )
            child = _created(goal="child").model_copy(
                update={"parent": ParentLink(run_id=parent, node_id="research", depth=1, inputs={})}
            )
            _, child_id = await store.create_run(child, idempotency_key=None, request_hash="c")
            await pool.execute(
                "UPDATE runs SET parked_until = 'infinity', owner = NULL, lease_expires_at = NULL"
                " WHERE run_id = $1",
                uuid.UUID(parent),
            )
            scan = Leases(pool, "another", 15.0)
            before = await scan.claim_orphans(driving=[child_id])

            await pool.execute("UPDATE runs SET finished_at = now() WHERE run_id = $1", uuid.UUID(child_id))
            after = await scan.claim_orphans(driving=[child_id])
            for _ in range(100):  # a notification arrives after its commit, on the listener's connection
                if heard:
                    break
                await asyncio.sleep(0.05)
        finally:
            await listener.close()
            await pool.close()

    assert before == []  # parked and not due: nobody's to claim
    assert [claim.run_id for claim in after] == [parent]
    assert heard == [parent]


async def test_an_append_is_one_call_recognised_when_retried_and_refused_to_another_owner(
    admin_dsn: str,
) -> None:
    from actors.store.ownership import LeaseLost
    from dag.events import RunFinished
    from dag.run_state import fold
    from dag.states import RunStatus, StopReason

    created = _created(goal="g", resource={"repo": "r"})
    finished = RunFinished(
        at=datetime.now().astimezone(),
        status=RunStatus.FAILED,
        stop_reason=StopReason.PLANNER_ERROR,
        detail="d",
    )
    state = fold([created, finished])
    async with _fresh_store(admin_dsn) as (store, pool):
        _, run_id = await store.create_run(created, idempotency_key=None, request_hash="h")
        await store.append(state, 2, [finished])
        await store.append(state, 2, [finished])  # retried after a lost acknowledgement: not written twice
        with pytest.raises(LeaseLost, match="owned by 'a', not 'b'"):
            await RunStore(pool, owner="b").append(state, 3, [finished])
        with pytest.raises(LeaseLost, match="at seq 2, expected 4"):
            await store.append(state, 5, [finished])
        async with pool.acquire() as connection:
            run = await connection.fetchrow("SELECT status, stop_reason, last_seq, finished_at FROM runs")
            kinds = await connection.fetch("SELECT seq, kind FROM run_events ORDER BY seq")
            audit = await connection.fetch("SELECT action, data, at FROM audit_events")
            outbox = await connection.fetch("SELECT topic, payload, created_at FROM outbox")

    assert dict(run) == {
        "status": "failed",
        "stop_reason": "PLANNER_ERROR",
        "last_seq": 2,
        "finished_at": finished.at,
    }
    assert [(row["seq"], row["kind"]) for row in kinds] == [(1, "run_created"), (2, "run_finished")]
    assert [(row["action"], row["data"]["detail"], row["at"]) for row in audit] == [
        ("run.failed", "d", finished.at)
    ]
    [event] = outbox
    assert (event["topic"], event["created_at"]) == ("run.finished", finished.at)
    assert event["payload"]["run_id"] == run_id
    assert event["payload"]["resource"] == {"repo": "r"}


@contextlib.asynccontextmanager
async def _fresh_store(admin_dsn: str) -> AsyncIterator[tuple[RunStore, asyncpg.Pool]]:
    """Owner "a"'s run store on a migrated database of the test's own, and its pool."""
    async with empty_database(admin_dsn) as fresh:
        await prepare_database(fresh)
        pool = await create_pool(fresh, max_size=2)
        try:
            yield RunStore(pool, owner="a"), pool
        finally:
            await pool.close()


@contextlib.asynccontextmanager
async def _runtime_pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(dsn, max_size=1)
    try:
        yield pool
    finally:
        await pool.close()


@contextlib.asynccontextmanager
async def _tool_server_pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    from dag.tokens import TaskTokens
    from mcp_server.config import ToolServerConfig
    from mcp_server.server import ToolServer

    server = ToolServer(
        ToolServerConfig(dsn=dsn, tokens=TaskTokens(key=b"k" * 32, audience="a"), pool_size=1)
    )
    async with server.lifespan():
        yield server._backend.live_pool()


@pytest.mark.parametrize("pooled", [_runtime_pool, _tool_server_pool], ids=["runtime", "tool server"])
async def test_a_released_connection_costs_no_round_trip_and_an_open_transaction_is_rolled_back(
    dsn: str, pooled: Any
) -> None:
    sent: list[str] = []
    async with pooled(dsn) as pool:
        async with pool.acquire() as connection:
            connection.add_query_logger(lambda logged: sent.append(logged.query))
            assert await connection.fetchval("SELECT 1") == 1
        assert sent == ["SELECT 1"]  # asyncpg's default reset would have sent its reset query here

        async with pool.acquire() as connection:
            await connection.execute("BEGIN")
            assert await connection.fetchval("SELECT txid_current_if_assigned()") is None
            await connection.fetchval("SELECT txid_current()")  # the transaction now holds an id
        async with pool.acquire() as connection:  # the same connection: the pool holds one
            assert not connection.is_in_transaction()
            assert await connection.fetchval("SELECT txid_current_if_assigned()") is None


async def test_a_lease_renewal_holds_a_run_that_just_finished_and_reports_one_taken_over(
    admin_dsn: str,
) -> None:
    from actors.store.ownership import Leases
    from dag.events import RunFinished
    from dag.run_state import fold
    from dag.states import RunStatus, StopReason

    async with empty_database(admin_dsn) as fresh:
        await prepare_database(fresh)
        pool = await create_pool(fresh, max_size=2)
        try:
            held, lapsed = RunStore(pool, owner="a"), RunStore(pool, owner="a", lease_s=0.0)
            created = {label: _created(goal=label) for label in ("live", "finished", "taken")}
            runs = {}
            for label, event in created.items():
                store = lapsed if label == "taken" else held  # only "taken" may be claimed by another owner
                _, runs[label] = await store.create_run(event, idempotency_key=None, request_hash=label)
            finished = RunFinished(
                at=datetime.now().astimezone(),
                status=RunStatus.FAILED,
                stop_reason=StopReason.PLANNER_ERROR,
                detail="d",
            )
            await held.append(fold([created["finished"], finished]), 2, [finished])
            [claim] = await Leases(pool, "b", 15.0).claim_orphans(driving=[])
            assert claim.run_id == runs["taken"]

            lease = "SELECT lease_expires_at FROM runs WHERE run_id = $1"
            before = {label: await pool.fetchval(lease, uuid.UUID(run_id)) for label, run_id in runs.items()}
            lost = await Leases(pool, "a", 15.0).renew(list(runs.values()))
            after = {label: await pool.fetchval(lease, uuid.UUID(run_id)) for label, run_id in runs.items()}
        finally:
            await pool.close()

    # The finished run's driver is only leaving: it is neither told it lost the run nor given a new lease.
    assert lost == {runs["taken"]}
    assert after["live"] > before["live"]
    assert after["finished"] == before["finished"]
    assert after["taken"] == before["taken"]  # another owner's lease is not this one's to extend


async def test_large_values_are_compressed_with_lz4_where_the_server_has_it(admin_dsn: str) -> None:
    """Migration 0009: a run's large values (its events, its result, the outbox's copy) are compressed with lz4 by
    a server built with it, and with pglz by one built without (the embedded PostgreSQL); read back the same."""
    from dag.events import RunFinished
    from dag.run_state import fold
    from dag.states import RunStatus, StopReason

    created = _created(goal="g", resource={"repo": "r"})
    finished = RunFinished(
        at=datetime.now().astimezone(),
        status=RunStatus.STOPPED,  # a run stopped at its deadline keeps what it had: here one large output
        stop_reason=StopReason.DEADLINE_EXCEEDED,
        result={"outputs": {"read": "the same line of a file, again and again\n" * 10_000}},
    )
    async with _fresh_store(admin_dsn) as (store, pool):
        _, run_id = await store.create_run(created, idempotency_key=None, request_hash="h")
        await store.append(fold([created, finished]), 2, [finished])
        events = await store.events(run_id)
        async with pool.acquire() as connection:
            has_lz4 = await connection.fetchval(
                "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
            )
            compressed = await connection.fetchrow(
                """SELECT (SELECT pg_column_compression(data) FROM run_events WHERE seq = 2) AS event,
                          (SELECT pg_column_compression(result) FROM runs) AS result,
                          (SELECT pg_column_compression(payload) FROM outbox) AS outbox"""
            )

    method = "lz4" if has_lz4 else "pglz"
    assert dict(compressed) == {"event": method, "result": method, "outbox": method}
    assert [stored.event for stored in events] == [created, finished]

"""The operation ledger's rows on real PostgreSQL: one row per operation, one winner per move."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import asyncpg
import pytest_asyncio

from actors.store.database import create_pool
from actors.store.operations import Operation, OperationStore
from actors.store.runs import RunStore
from dag.budget import Budgets
from dag.contracts import Recording, Risk
from dag.events import ErrorKind, NodeError, RunCreated
from dag.operations import OperationState, arguments_hash, intent_hash
from dag.writes import Approval, Intent

ARGS = {"case_id": "C-103", "draft_id": "DRAFT-1"}
EVERY_ARGUMENT = Intent()


async def a_run(pool: asyncpg.Pool) -> str:
    """A new live run of tenant-demo, for operations to belong to."""
    created = RunCreated(
        at=datetime.now().astimezone(),
        run_id=str(uuid.uuid4()),
        tenant_id="tenant-demo",
        subject="test",
        scopes=(),
        resource={"case_id": "C-103"},
        goal="g",
        planner="outputs",
        budgets=Budgets(),
    )
    await RunStore(pool).create_run(created, idempotency_key=None, request_hash="h")
    return created.run_id


@pytest_asyncio.fixture
async def pool(dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(dsn, max_size=12)
    yield pool
    await pool.close()


@pytest_asyncio.fixture
async def ledger(pool: asyncpg.Pool) -> tuple[OperationStore, str]:
    """The ledger, and a run of its own for the operations to belong to."""
    return OperationStore(pool), await a_run(pool)


async def propose(
    store: OperationStore,
    run_id: str,
    node_id: str = "send",
    args: dict[str, str] | None = None,
    *,
    intent: Intent = EVERY_ARGUMENT,
) -> Operation:
    """``run_id``'s proposal of sending ``args`` (by default, a draft of the run's own: no other test's)."""
    args = args if args is not None else {**ARGS, "draft_id": f"DRAFT-{run_id}"}
    return await store.propose(
        run_id=run_id,
        node_id=node_id,
        tenant_id="tenant-demo",
        subject="test",
        resource={"case_id": "C-103"},
        tool="send",
        description="Send it.",
        risk=Risk.IRREVERSIBLE_WRITE,
        approval=Approval.PERSON,
        recording=Recording.FULL,
        args=args,
        args_hash=arguments_hash(args),
        intent=intent,
        intent_hash=intent_hash(intent, args),
        actor="supervisor:test",
    )


async def approved(store: OperationStore, run_id: str) -> Operation:
    row = await propose(store, run_id)
    for state in (OperationState.VALIDATED, OperationState.APPROVED):
        moved = await store.move(row.operation_id, state, actor="test")
        assert moved is not None
    return row


async def test_the_same_write_proposed_by_many_nodes_at_once_is_one_row_that_keeps_its_first_node(
    ledger: tuple[OperationStore, str],
) -> None:
    store, run_id = ledger

    rows = await asyncio.gather(*(propose(store, run_id, node_id=f"n{index}") for index in range(8)))

    assert len({row.operation_id for row in rows}) == 1
    assert len({row.node_id for row in rows}) == 1  # every proposal got the first one's row
    assert len(await store.of_run(run_id)) == 1
    assert [
        step.to_state for step in (await store.history([rows[0].operation_id]))[rows[0].operation_id]
    ] == [OperationState.PROPOSED]


async def test_of_many_callers_claiming_one_approved_operation_exactly_one_may_execute_it(
    ledger: tuple[OperationStore, str],
) -> None:
    store, run_id = ledger
    row = await approved(store, run_id)

    claims = await asyncio.gather(
        *(
            store.move(
                row.operation_id,
                OperationState.EXECUTING,
                actor=f"caller-{index}",
                sources={OperationState.APPROVED},
            )
            for index in range(10)
        )
    )

    winners = [claim for claim in claims if claim is not None]
    assert len(winners) == 1
    assert winners[0].attempts == 1
    assert winners[0].executing_since is not None
    history = (await store.history([row.operation_id]))[row.operation_id]
    assert [step.to_state for step in history].count(OperationState.EXECUTING) == 1


async def test_a_decision_on_other_arguments_moves_nothing(ledger: tuple[OperationStore, str]) -> None:
    store, run_id = ledger
    row = await propose(store, run_id)
    await store.move(row.operation_id, OperationState.VALIDATED, actor="test")
    await store.move(row.operation_id, OperationState.AWAITING_APPROVAL, actor="test")

    stale = await store.move(
        row.operation_id,
        OperationState.APPROVED,
        actor="person",
        sources={OperationState.AWAITING_APPROVAL},
        quoted_hash=arguments_hash(ARGS),  # the run's draft is another
    )

    assert stale is None
    current = await store.get(row.operation_id)
    assert current is not None
    assert current.state is OperationState.AWAITING_APPROVAL


async def test_a_late_answer_settles_an_operation_marked_unknown_and_a_success_clears_the_error(
    ledger: tuple[OperationStore, str],
) -> None:
    store, run_id = ledger
    row = await approved(store, run_id)
    await store.move(
        row.operation_id, OperationState.EXECUTING, actor="caller", sources={OperationState.APPROVED}
    )
    timeout = NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message="no answer")
    await store.move(row.operation_id, OperationState.UNKNOWN, actor="caller", error=timeout)

    # The table decides, not the caller: unknown → unknown is no move, whatever sources a caller names.
    assert (
        await store.move(
            row.operation_id,
            OperationState.UNKNOWN,
            actor="late",
            sources={OperationState.EXECUTING, OperationState.UNKNOWN},
        )
        is None
    )
    settled = await store.move(
        row.operation_id, OperationState.SUCCEEDED, actor="late", output={"request_id": "R"}, has_output=True
    )

    assert settled is not None
    assert (settled.state, settled.output, settled.error) == (
        OperationState.SUCCEEDED,
        {"request_id": "R"},
        None,
    )
    assert (
        await store.move(row.operation_id, OperationState.FAILED, actor="again") is None
    )  # settled is settled
    count, _ = await store.unknown()
    assert count == 0 or all(row.state is not OperationState.UNKNOWN for row in await store.of_run(run_id))


# ------------------------------------------------------------------ one intent across runs


async def moved_through(store: OperationStore, row: Operation, *states: OperationState) -> Operation:
    for state in states:
        moved = await store.move(row.operation_id, state, actor="test")
        assert moved is not None, state
        row = moved
    return row


async def test_runs_proposing_one_intent_at_once_converge_on_one_row_that_each_of_them_shares(
    pool: asyncpg.Pool,
) -> None:
    store = OperationStore(pool)
    runs = [await a_run(pool) for _ in range(8)]
    args = {**ARGS, "draft_id": f"DRAFT-{uuid.uuid4()}"}

    rows = await asyncio.gather(*(propose(store, run_id, args=args) for run_id in runs))

    assert len({row.operation_id for row in rows}) == 1
    [operation] = {row.operation_id for row in rows}
    sharers = (await store.sharers([operation]))[operation]
    assert sorted(sharer.run_id for sharer in sharers) == sorted(runs)
    assert sharers[0].run_id == rows[0].run_id  # the first to propose it is listed first, and on its row
    for run_id in runs:
        assert [row.operation_id for row in await store.of_run(run_id)] == [operation]
    count = await pool.fetchval("SELECT count(*) FROM operations WHERE args_hash = $1", arguments_hash(args))
    assert count == 1


async def test_an_intent_that_never_acted_is_proposed_anew_and_a_success_is_joined_within_its_window(
    pool: asyncpg.Pool,
) -> None:
    store = OperationStore(pool)
    first, second, third, fourth = [await a_run(pool) for _ in range(4)]
    args = {**ARGS, "draft_id": f"DRAFT-{uuid.uuid4()}"}
    daily = Intent(window_s=86400)

    rejected = await moved_through(
        store,
        await propose(store, first, args=args, intent=daily),
        OperationState.VALIDATED,
        OperationState.AWAITING_APPROVAL,
        OperationState.REJECTED,
    )
    anew = await propose(store, second, args=args, intent=daily)
    assert (anew.generation, anew.state) == (2, OperationState.PROPOSED)
    assert anew.operation_id != rejected.operation_id
    again = await propose(store, first, args=args, intent=daily)  # its own run proposing it again
    assert again.operation_id == rejected.operation_id

    succeeded = await moved_through(
        store,
        anew,
        OperationState.VALIDATED,
        OperationState.APPROVED,
        OperationState.EXECUTING,
        OperationState.SUCCEEDED,
    )
    read = await propose(store, third, args=args, intent=daily)
    assert (read.operation_id, read.state) == (succeeded.operation_id, OperationState.SUCCEEDED)

    # A day later the success is history: the same intent is a new operation.
    await pool.execute(
        "UPDATE operations SET updated_at = now() - interval '1 day' WHERE operation_id = $1",
        uuid.UUID(succeeded.operation_id),
    )
    later = await propose(store, fourth, args=args, intent=daily)
    assert (later.generation, later.state) == (3, OperationState.PROPOSED)
    forever = await propose(store, third, args={**args, "extra": "x"}, intent=Intent())
    assert forever.generation == 1  # other arguments: another intent


async def finish(pool: asyncpg.Pool, run_id: str) -> None:
    await pool.execute("UPDATE runs SET finished_at = now() WHERE run_id = $1", uuid.UUID(run_id))


async def test_a_stopping_run_expires_only_what_no_other_live_run_waits_on(pool: asyncpg.Pool) -> None:
    store = OperationStore(pool)
    first, second = await a_run(pool), await a_run(pool)
    awaiting = await moved_through(
        store, await propose(store, first), OperationState.VALIDATED, OperationState.AWAITING_APPROVAL
    )
    await propose(store, second, args=dict(awaiting.args))

    assert await store.expire_unshared(first, actor="test", note="first stopped") == []
    current = await store.get(awaiting.operation_id)
    assert current is not None
    assert current.state is OperationState.AWAITING_APPROVAL  # the second run still waits on it

    # Both stopping at once, neither finished yet: the first let go of it, so the second expires it.
    assert await store.expire_unshared(second, actor="test", note="second stopped") == [awaiting.operation_id]


async def test_an_intent_left_waiting_past_its_deadline_is_expired_and_proposed_anew(
    pool: asyncpg.Pool,
) -> None:
    store = OperationStore(pool)
    first, second = await a_run(pool), await a_run(pool)
    row = await moved_through(store, await propose(store, first), OperationState.VALIDATED)
    late = await store.move(
        row.operation_id,
        OperationState.AWAITING_APPROVAL,
        actor="test",
        expires_at=datetime.now().astimezone() - timedelta(seconds=1),
    )
    assert late is not None

    anew = await propose(store, second, args=dict(row.args))

    assert (anew.generation, anew.state) == (2, OperationState.PROPOSED)
    expired = await store.get(row.operation_id)
    assert expired is not None
    assert expired.state is OperationState.EXPIRED
    assert (await store.history([row.operation_id]))[row.operation_id][-1].actor == "deadline"


async def test_an_operation_out_is_unattended_only_once_every_run_sharing_it_has_ended(
    pool: asyncpg.Pool,
) -> None:
    store = OperationStore(pool)
    first, second = await a_run(pool), await a_run(pool)
    out = await moved_through(
        store,
        await propose(store, first),
        OperationState.VALIDATED,
        OperationState.APPROVED,
        OperationState.EXECUTING,
    )
    await propose(store, second, args=dict(out.args))
    await finish(pool, first)

    assert out.operation_id not in {row.operation_id for row in await store.unattended(limit=10_000)}
    await finish(pool, second)
    assert out.operation_id in {row.operation_id for row in await store.unattended(limit=10_000)}

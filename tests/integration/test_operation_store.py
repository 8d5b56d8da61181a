"""The operation ledger's rows on real PostgreSQL: one row per operation, one winner per move."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import pytest_asyncio

from actors.store.database import create_pool
from actors.store.operations import Operation, OperationStore
from actors.store.runs import RunStore
from dag.budget import Budgets
from dag.contracts import Recording, Risk
from dag.events import ErrorKind, NodeError, RunCreated
from dag.operations import OperationState, arguments_hash, operation_id
from dag.writes import Approval

ARGS = {"case_id": "C-103", "draft_id": "DRAFT-1"}


@pytest_asyncio.fixture
async def ledger(dsn: str) -> AsyncIterator[tuple[OperationStore, str]]:
    """The ledger, and a run of its own for the operations to belong to."""
    pool = await create_pool(dsn, max_size=12)
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
    yield OperationStore(pool), created.run_id
    await pool.close()


async def propose(
    store: OperationStore, run_id: str, node_id: str = "send", args: dict[str, str] = ARGS
) -> Operation:
    digest = arguments_hash(args)
    return await store.propose(
        operation_id=operation_id(run_id, "send", digest),
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
        args_hash=digest,
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
        quoted_hash=arguments_hash({**ARGS, "draft_id": "DRAFT-2"}),
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

"""Plan reviews' rows on real PostgreSQL: a yes is to one plan's hash, and a plan never recorded loses its
review to the one that was."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import asyncpg
import pytest
import pytest_asyncio

from actors.run.approvals import DecisionRefused, Person, decide_plan
from actors.store.database import create_pool
from actors.store.decisions import LISTENING_READ_EVERY_S, DecisionWakeups
from actors.store.reviews import Review, ReviewStore
from actors.store.runs import RunStore
from dag.budget import Budgets
from dag.events import RunCreated
from dag.policy import TenantPolicy
from dag.review import ReviewRefusal, ReviewState, plan_hash

PLAN_A = {"nodes": [{"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}}]}
PLAN_B = {"nodes": [{"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-103"}}]}
REVIEWER = Person("tenant-demo", "reviewer")


@pytest_asyncio.fixture
async def reviews(dsn: str) -> AsyncIterator[tuple[ReviewStore, str]]:
    """The store, and a run of its own for the reviews to belong to."""
    pool = await create_pool(dsn, max_size=12)
    created = RunCreated(
        at=datetime.now().astimezone(),
        run_id=str(uuid.uuid4()),
        tenant_id="tenant-demo",
        subject="requester",
        scopes=(),
        resource={"case_id": "C-102"},
        goal="g",
        planner="outputs",
        budgets=Budgets(),
        review=True,
    )
    await RunStore(pool).create_run(created, idempotency_key=None, request_hash="h")
    yield ReviewStore(pool), created.run_id
    await pool.close()


async def ask(store: ReviewStore, run_id: str, plan: dict[str, object]) -> Review:
    return await store.request(
        run_id=run_id,
        round_number=1,
        tenant_id="tenant-demo",
        subject="requester",
        plan=plan,
        plan_hash=plan_hash(plan),
        nodes=("case",),
        expires_at=datetime.now().astimezone() + timedelta(hours=1),
        actor="supervisor:test",
    )


async def test_asking_again_for_the_same_plan_is_the_same_review(reviews: tuple[ReviewStore, str]) -> None:
    store, run_id = reviews

    first = await ask(store, run_id, PLAN_A)
    again = await ask(store, run_id, PLAN_A)

    assert again == first
    assert await store.of_run(run_id) == [first]


async def test_a_plan_never_recorded_loses_its_review_to_the_plan_that_was(
    reviews: tuple[ReviewStore, str],
) -> None:
    """A supervisor asked for plan A's review and died before recording A; the planner then proposed B. No
    yes to A may let B run: A's review is expired, and a decision quoting A's hash is refused."""
    store, run_id = reviews
    stale = await ask(store, run_id, PLAN_A)
    live = await ask(store, run_id, PLAN_B)

    with pytest.raises(DecisionRefused) as refused:
        await decide_plan(
            store, run_id, 1, "approve", quoted_hash=stale.plan_hash, person=REVIEWER, policy=TenantPolicy()
        )
    decided = await decide_plan(
        store, run_id, 1, "approve", quoted_hash=live.plan_hash, person=REVIEWER, policy=TenantPolicy()
    )

    assert refused.value.refusal is ReviewRefusal.HASH_MISMATCH
    expired = await store.get(run_id, 1, stale.plan_hash)
    assert expired is not None
    assert (expired.state, expired.decided_by) == (ReviewState.EXPIRED, "supervisor:test")
    assert (decided.state, decided.plan_hash, decided.decided_by) == (
        ReviewState.APPROVED,
        plan_hash(PLAN_B),
        "person:tenant-demo/reviewer",
    )


async def test_of_ten_people_deciding_one_plan_at_once_one_decides(reviews: tuple[ReviewStore, str]) -> None:
    store, run_id = reviews
    review = await ask(store, run_id, PLAN_A)

    async def decide(index: int) -> str:
        try:
            decided = await decide_plan(
                store,
                run_id,
                1,
                "approve" if index % 2 else "reject",
                quoted_hash=review.plan_hash,
                person=Person("tenant-demo", f"reviewer-{index}"),
                policy=TenantPolicy(),
            )
        except DecisionRefused as refused:
            return refused.refusal.value
        return decided.state.value

    outcomes = await asyncio.gather(*(decide(index) for index in range(10)))

    assert sorted(outcomes).count("review-already-decided") == 9
    assert len({"approved", "rejected"} & set(outcomes)) == 1


async def listening(wakeups: DecisionWakeups, listens: bool) -> None:
    """Until ``wakeups`` listens (or, ``listens=False``, has lost its connection), 20 s at most."""
    for _ in range(400):
        if (wakeups.read_every_s == LISTENING_READ_EVERY_S) is listens:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the listener never {'listened' if listens else 'lost its connection'}")


async def test_a_decision_wakes_the_run_waiting_on_it_and_a_lost_listener_catches_up(
    reviews: tuple[ReviewStore, str], dsn: str
) -> None:
    """Written by any connection (the API's, a script's), a decision wakes its run's waiter through the
    trigger's notification, not its next read. A listener whose connection is lost connects again, and wakes
    every waiter to read what it may have missed."""
    store, run_id = reviews
    name = f"decisions-{uuid.uuid4().hex[:8]}"
    wakeups = DecisionWakeups(dsn, application_name=name)
    listener = asyncio.create_task(wakeups.keep_listening())
    try:
        await listening(wakeups, True)
        asked = await ask(store, run_id, PLAN_A)
        with wakeups.watching(run_id) as woken, wakeups.watching(str(uuid.uuid4())) as elsewhere:
            await decide_plan(
                store,
                run_id,
                1,
                "approve",
                quoted_hash=asked.plan_hash,
                person=REVIEWER,
                policy=TenantPolicy(),
            )
            await asyncio.wait_for(woken.wait(), 10)  # the guard turns a missed wake-up into a failure
            assert not elsewhere.is_set()  # another run's waiter sleeps on

            connection = await asyncpg.connect(dsn)
            try:
                await connection.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", name
                )
            finally:
                await connection.close()
            await listening(wakeups, False)
            elsewhere.clear()
            await listening(wakeups, True)
            assert elsewhere.is_set()  # on connecting again: every waiter reads once
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener

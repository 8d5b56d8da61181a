"""Retries within deadlines: a hanging attempt ends with its window, a request's statements share one budget,
and waiting for a turn at a busy pool is queueing, not an outage."""

from __future__ import annotations

import asyncio

import pytest

from actors.store import resilience
from actors.store.resilience import (
    REQUEST_WINDOW_S,
    RUN_WINDOW_S,
    DatabaseBusy,
    DatabaseUnavailable,
    Line,
    deadline,
    remaining_s,
    retrying,
)


async def test_an_attempt_that_never_answers_ends_with_the_window_even_if_it_ignores_cancellation() -> None:
    never = asyncio.get_running_loop().create_future()

    async def hangs_like_a_cancelled_asyncpg_statement() -> None:
        # A cancelled statement on a partitioned connection waits for its cancel request: shielded here.
        await asyncio.shield(never)

    with pytest.raises(DatabaseUnavailable):
        await retrying(hangs_like_a_cancelled_asyncpg_statement, window_s=0.2, what="a statement")
    never.cancel()


async def test_statements_of_one_request_share_its_deadline() -> None:
    never = asyncio.get_running_loop().create_future()
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError

    with deadline(0.2):
        with pytest.raises(DatabaseUnavailable):  # the first statement hangs and uses the budget up
            await retrying(lambda: asyncio.shield(never), window_s=REQUEST_WINDOW_S, what="a read")
        with pytest.raises(DatabaseUnavailable):
            await retrying(refused, window_s=REQUEST_WINDOW_S, what="another read")
    never.cancel()

    assert attempts == 1  # alone, its own window would have retried it several times


async def test_alone_a_refused_statement_is_retried_through_its_window() -> None:
    attempts = 0

    async def refused() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionRefusedError

    with pytest.raises(DatabaseUnavailable):
        await retrying(refused, window_s=REQUEST_WINDOW_S, what="a read")

    assert attempts > 1


async def test_a_server_out_of_connection_slots_is_an_outage_retried_within_the_window() -> None:
    """PostgreSQL at ``max_connections`` refuses a new connection (SQLSTATE 53300): the statement is tried
    again, and a refusal that lasts is the 503 ``database-unavailable``, never an unhandled error."""
    import asyncpg

    attempts = 0

    async def no_slot_left() -> None:
        nonlocal attempts
        attempts += 1
        raise asyncpg.TooManyConnectionsError("sorry, too many clients already")

    with pytest.raises(DatabaseUnavailable):
        await retrying(no_slot_left, window_s=REQUEST_WINDOW_S, what="a read")

    assert attempts > 1


async def test_a_runs_transition_is_not_cut_short_by_a_request_deadline() -> None:
    failures = iter([ConnectionResetError(), ConnectionResetError()])

    async def flaky() -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "appended"

    with deadline(0.0):
        assert await retrying(flaky, window_s=RUN_WINDOW_S, what="an append") == "appended"


async def test_a_statement_that_fails_once_is_retried_once_and_logged_as_the_second_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    attempts = 0

    async def dropped_once() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionResetError
        return "appended"

    with caplog.at_level("WARNING", logger=resilience.__name__):
        assert await retrying(dropped_once, window_s=RUN_WINDOW_S, what="an append") == "appended"

    assert attempts == 2
    assert [record.getMessage() for record in caplog.records] == [
        "retrying an append after a database connection error (attempt 2)"
    ]


async def test_a_statement_that_fails_for_any_other_reason_is_not_retried() -> None:
    attempts = 0

    async def rejected() -> None:
        nonlocal attempts
        attempts += 1
        raise ValueError("a unique violation, say")

    with pytest.raises(ValueError, match="unique violation"):
        await retrying(rejected, window_s=RUN_WINDOW_S, what="an insert")

    assert attempts == 1


async def test_a_nested_deadline_gives_a_fresh_budget_and_the_outer_one_returns() -> None:
    with deadline(0.0):
        assert remaining_s() == 0.0
        with deadline(30.0):
            assert remaining_s() > 1.0
        assert remaining_s() == 0.0


async def _quick() -> str:
    return "read"


async def _holding(
    line: Line, release: asyncio.Event, *, window_s: float = REQUEST_WINDOW_S
) -> asyncio.Task[str]:
    """A request's statement that holds ``line``'s only turn until ``release`` is set."""

    async def statement() -> str:
        await release.wait()
        return "held"

    task = asyncio.ensure_future(retrying(statement, window_s=window_s, what="a held read", line=line))
    await asyncio.sleep(0)  # it takes the turn
    return task


async def test_a_request_that_waited_its_turn_longer_than_its_deadline_still_gets_its_window() -> None:
    line = Line(1)
    release = asyncio.Event()
    with deadline(5.0):
        holder = await _holding(line, release)

    async def round_trip() -> str:
        await asyncio.sleep(0.01)
        return "read"

    with deadline(0.1):
        waiting = asyncio.ensure_future(
            retrying(round_trip, window_s=REQUEST_WINDOW_S, what="a read", line=line)
        )
        await asyncio.sleep(0.3)  # three times its deadline, all of it in line
        release.set()
        assert await waiting == "read"
    assert await holder == "held"


async def test_once_the_database_is_unreachable_those_in_line_and_those_arriving_leave_at_once() -> None:
    line = Line(1)
    refused_once = asyncio.Event()

    async def refused() -> None:
        refused_once.set()
        raise ConnectionRefusedError

    probing = asyncio.ensure_future(retrying(refused, window_s=0.3, what="a probe", line=line))
    await refused_once.wait()
    waiting = asyncio.ensure_future(
        retrying(_quick, window_s=REQUEST_WINDOW_S, what="a waiting read", line=line)
    )
    await asyncio.sleep(0)
    assert not waiting.done()  # in line while the probe still retries

    with pytest.raises(DatabaseUnavailable):
        await probing
    with pytest.raises(DatabaseUnavailable):
        await waiting  # released with the probe's verdict, never ran
    release = asyncio.Event()
    holder = await _holding(line, release)
    with pytest.raises(DatabaseUnavailable, match="unreachable and every connection is in use"):
        await retrying(_quick, window_s=REQUEST_WINDOW_S, what="an arriving read", line=line)
    release.set()
    assert await holder == "held"  # the first statement answered ends the outage
    holder = await _holding(line, asyncio.Event())
    queued = asyncio.ensure_future(
        retrying(_quick, window_s=REQUEST_WINDOW_S, what="a queued read", line=line)
    )
    await asyncio.sleep(0)
    assert not queued.done()  # waits its turn again
    holder.cancel()
    assert await queued == "read"


async def test_a_request_given_up_in_line_leaves_no_turn_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resilience, "QUEUE_S", 0.05)
    line = Line(1)
    release = asyncio.Event()
    holder = await _holding(line, release)
    abandoned = asyncio.ensure_future(retrying(_quick, window_s=REQUEST_WINDOW_S, what="a read", line=line))
    await asyncio.sleep(0)
    abandoned.cancel()
    release.set()
    assert await holder == "held"
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    # Had the abandoned request kept the turn, this would wait in line and end busy.
    assert await retrying(_quick, window_s=REQUEST_WINDOW_S, what="the next read", line=line) == "read"


async def test_a_pool_busy_past_the_queue_limit_says_busy_not_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resilience, "QUEUE_S", 0.05)
    line = Line(1)
    release = asyncio.Event()
    holder = await _holding(line, release)
    with pytest.raises(DatabaseBusy, match="stayed in use"):
        await retrying(_quick, window_s=REQUEST_WINDOW_S, what="a read", line=line)
    release.set()
    assert await holder == "held"

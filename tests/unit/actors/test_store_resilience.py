"""Retries within deadlines: a hanging attempt ends with its window, a request's statements share one budget."""

from __future__ import annotations

import asyncio

import pytest

from actors.store.resilience import (
    REQUEST_WINDOW_S,
    RUN_WINDOW_S,
    DatabaseUnavailable,
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


async def test_a_runs_transition_is_not_cut_short_by_a_request_deadline() -> None:
    failures = iter([ConnectionResetError(), ConnectionResetError()])

    async def flaky() -> str:
        error = next(failures, None)
        if error is not None:
            raise error
        return "appended"

    with deadline(0.0):
        assert await retrying(flaky, window_s=RUN_WINDOW_S, what="an append") == "appended"


async def test_a_nested_deadline_gives_a_fresh_budget_and_the_outer_one_returns() -> None:
    with deadline(0.0):
        assert remaining_s() == 0.0
        with deadline(30.0):
            assert remaining_s() > 1.0
        assert remaining_s() == 0.0

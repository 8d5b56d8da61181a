"""The API's line for submissions to the supervisor: a burst waits its turn there, outside the request's
deadline; a supervisor that stops answering sends everyone in line away at once; one that answers, but not
fast enough for the line to move, is busy, not down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from ray.exceptions import ActorUnavailableError

from actors.api import Problem, ask, submissions
from actors.api import _outcomes as outcomes
from actors.store import resilience
from actors.store.resilience import deadline


def held_answers() -> tuple[asyncio.Event, Callable[[], Callable[[], Awaitable[str]]]]:
    """Calls that answer ``"created"`` once the event is set, as a supervisor busy with others would."""
    release = asyncio.Event()

    def call() -> Callable[[], Awaitable[str]]:
        async def answer() -> str:
            await release.wait()
            return "created"

        return answer

    return release, call


async def fill(line: resilience.Line, call: Callable[[], Awaitable[str]]) -> list[asyncio.Future[str]]:
    holders = [
        asyncio.ensure_future(ask(call, within_s=30, line=line)) for _ in range(outcomes.SUBMISSIONS_AT_ONCE)
    ]
    await asyncio.sleep(0)
    return holders


async def test_a_submission_that_waited_in_line_longer_than_its_deadline_is_still_answered() -> None:
    line = submissions()
    release, call = held_answers()
    holders = await fill(line, call())

    async def quick() -> str:
        return "created"

    with deadline(0.1):
        waiting = asyncio.ensure_future(ask(quick, line=line))
        await asyncio.sleep(0.3)  # three times its deadline, all of it in line
        assert not waiting.done()
        release.set()
        assert await waiting == "created"
    assert await asyncio.gather(*holders) == ["created"] * outcomes.SUBMISSIONS_AT_ONCE


async def test_a_silent_supervisor_sends_those_in_line_and_those_arriving_away_at_once() -> None:
    line = submissions()
    release, call = held_answers()
    holders = [
        asyncio.ensure_future(ask(call(), within_s=30, line=line))
        for _ in range(outcomes.SUBMISSIONS_AT_ONCE - 1)
    ]
    restarting = asyncio.Event()

    async def silent() -> str:
        await restarting.wait()
        raise ActorUnavailableError("restarting", b"\0" * 16)

    probe = asyncio.ensure_future(ask(silent, line=line))  # the last slot
    await asyncio.sleep(0)
    waiting = asyncio.ensure_future(ask(call(), line=line))
    await asyncio.sleep(0)
    assert not waiting.done()  # in line behind a full set of slots

    restarting.set()
    with pytest.raises(Problem) as failed:
        await probe
    with pytest.raises(Problem) as sent_away:
        await waiting  # never asked: sent away with the probe's verdict
    holders.append(
        asyncio.ensure_future(ask(call(), within_s=30, line=line))
    )  # the probe's slot, taken again
    await asyncio.sleep(0)
    with pytest.raises(Problem) as refused:
        await ask(call(), line=line)  # every slot taken during the outage: refused at once

    for problem in (failed.value, sent_away.value, refused.value):
        assert (problem.status, problem.slug) == (503, "supervisor-unavailable")
    release.set()
    assert await asyncio.gather(*holders) == ["created"] * outcomes.SUBMISSIONS_AT_ONCE


async def test_a_line_that_does_not_move_for_the_queue_limit_is_busy_not_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resilience, "QUEUE_S", 0.05)
    line = submissions()
    release, call = held_answers()
    holders = await fill(line, call())

    with pytest.raises(Problem) as busy:
        await ask(call(), line=line)

    assert (busy.value.status, busy.value.slug) == (503, "supervisor-busy")
    assert busy.value.headers["Retry-After"] == str(outcomes.SUPERVISOR_RETRY_AFTER_S)
    release.set()
    assert await asyncio.gather(*holders) == ["created"] * outcomes.SUBMISSIONS_AT_ONCE

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
from actors.api.supervisors import PROBE_AFTER_S, Supervisors, next_in_turn
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


def test_new_runs_go_to_each_supervisor_in_turn_past_one_in_an_outage() -> None:
    names = ("s", "s-1", "s-2")
    answering = dict.fromkeys(names)
    assert [next_in_turn(names, turn, answering, now=100.0) for turn in range(4)] == [0, 1, 2, 0]
    out = {**answering, "s-1": 99.0}  # its last submission found it dead a second ago
    assert [next_in_turn(names, turn, out, now=100.0) for turn in range(3)] == [0, 2, 2]
    # Once the outage is PROBE_AFTER_S old a run tries it again, so that its recovery is noticed.
    assert next_in_turn(names, 1, out, now=99.0 + PROBE_AFTER_S) == 1
    # Every one out: the turn stands (its run gets a 503 with Retry-After, and its client retries).
    assert next_in_turn(names, 1, dict.fromkeys(names, 99.0), now=100.0) == 1


async def test_a_supervisor_found_dead_is_passed_over_and_tried_again_by_one_run_alone() -> None:
    supervisors = Supervisors({"s": "first", "s-1": "second"})
    first, line = supervisors.next()
    assert first == "first"

    async def dead() -> str:
        raise ActorUnavailableError("the actor is restarting", None)

    with pytest.raises(Problem):
        await ask(dead, within_s=1, line=line)
    assert [supervisors.next()[0] for _ in range(3)] == ["second"] * 3

    line.probe()  # as next() does once the outage is old: the outage counts as seen again now
    assert line.outage_seen_at is not None
    assert [supervisors.next()[0] for _ in range(2)] == ["second"] * 2

    async def alive() -> str:
        return "created"

    assert await ask(alive, within_s=1, line=line) == "created"  # the probe is answered: the outage ends
    assert line.outage_seen_at is None
    assert [supervisors.next()[0] for _ in range(2)] == ["first", "second"]

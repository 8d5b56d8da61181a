"""The replay cache's group commit: which uses go together into one statement, and what each use is told.

The statement itself runs against PostgreSQL in tests/integration/test_mcp_security.py; here a strict
in-memory table stands in for it, so the batching can be driven step by step.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from dag.tokens import TaskClaims
from mcp_server.replay import ReplayCache


def claims(jti: str | None = None) -> TaskClaims:
    return TaskClaims(
        iss="raydag",
        aud="http://replay.test/mcp",
        sub="s",
        tenant_id="tenant-demo",
        task_id="r/n/1",
        resource={"case_id": "C-102"},
        tool="snapshot",
        scope="cases:read",
        iat=0,
        nbf=0,
        exp=60,
        jti=jti or uuid.uuid4().hex,
    )


class Table:
    """``task_token_uses`` as the INSERT ... ON CONFLICT DO NOTHING RETURNING jti sees it; each statement
    waits for ``release`` while ``held``, so a test decides when it ends."""

    def __init__(self) -> None:
        self.rows: set[str] = set()
        self.statements: list[list[str]] = []
        self.held = False
        self.release = asyncio.Event()
        self.fail_next = False

    async def fetch(self, query: str, jtis: list[str], tenants: list[str], expires: list[float]) -> list[Any]:
        assert "ON CONFLICT (jti) DO NOTHING" in query
        assert len(jtis) == len(set(jtis)) == len(tenants) == len(expires), "one row per token"
        self.statements.append(list(jtis))
        if self.held:
            await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("database unreachable")
        fresh = [jti for jti in jtis if jti not in self.rows]
        self.rows.update(fresh)
        return [{"jti": jti} for jti in fresh]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_lone_use_is_written_at_once_by_itself() -> None:
    table = Table()
    cache = ReplayCache(lambda: table)  # type: ignore[arg-type,return-value]

    assert await cache.first_use(claims("a")) is True
    assert await cache.first_use(claims("a")) is False
    assert table.statements == [["a"], ["a"]]


async def test_uses_arriving_while_writes_are_in_flight_go_together_in_one_statement() -> None:
    table = Table()
    table.held = True
    cache = ReplayCache(lambda: table, writers=2)  # type: ignore[arg-type,return-value]
    first = asyncio.ensure_future(cache.first_use(claims("a")))
    await settle()
    second = asyncio.ensure_future(cache.first_use(claims("b")))
    await settle()
    burst = [asyncio.ensure_future(cache.first_use(claims(f"c{index}"))) for index in range(10)]
    await settle()
    assert table.statements == [["a"], ["b"]]  # two writers busy: the burst waits for one of them

    table.release.set()
    answers = await asyncio.gather(first, second, *burst)

    assert answers == [True] * 12
    assert len(table.statements) == 3
    assert sorted(table.statements[2]) == sorted(f"c{index}" for index in range(10))


async def test_the_same_token_twice_in_one_batch_is_a_first_use_once() -> None:
    table = Table()
    table.held = True
    cache = ReplayCache(lambda: table, writers=1)  # type: ignore[arg-type,return-value]
    blocker = asyncio.ensure_future(cache.first_use(claims("x")))
    await settle()
    twice = [asyncio.ensure_future(cache.first_use(claims("same"))) for _ in range(3)]
    await settle()

    table.release.set()
    await blocker

    assert [await use for use in twice] == [True, False, False]
    assert table.statements[1] == ["same"]


async def test_a_failed_statement_fails_its_batch_and_the_next_batch_is_still_written() -> None:
    table = Table()
    table.held = True
    cache = ReplayCache(lambda: table, writers=1)  # type: ignore[arg-type,return-value]
    doomed = asyncio.ensure_future(cache.first_use(claims("a")))
    await settle()
    later = asyncio.ensure_future(cache.first_use(claims("b")))
    await settle()

    table.fail_next = True
    table.release.set()

    with pytest.raises(ConnectionError):
        await doomed
    assert await later is True
    assert table.statements == [["a"], ["b"]]


async def test_a_use_whose_caller_gave_up_leaves_the_others_answered() -> None:
    table = Table()
    table.held = True
    cache = ReplayCache(lambda: table, writers=1)  # type: ignore[arg-type,return-value]
    blocker = asyncio.ensure_future(cache.first_use(claims("x")))
    await settle()
    abandoned = asyncio.ensure_future(cache.first_use(claims("gone")))
    kept = asyncio.ensure_future(cache.first_use(claims("kept")))
    await settle()
    abandoned.cancel()

    table.release.set()

    assert await blocker is True
    assert await kept is True
    assert abandoned.cancelled()
    assert "gone" in table.rows  # recorded all the same: a token once presented stays used

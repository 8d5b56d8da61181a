"""A supervisor drives at most ``max_active_runs`` runs at once: the others are accepted, owned and leased,
and wait their turn, oldest first; a run cancelled while it waits is recorded as cancelled without being
planned, and one waiting when the supervisor hands over is handed over untouched. Real PostgreSQL and a real
tool server over HTTP."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from actors.calls.executors import InlineExecutor
from actors.run.deps import RunDeps, ToolEndpoint
from actors.run.service import RunService
from actors.run.submission import Cancellation, RunRequest, Submission
from actors.store.database import create_pool
from actors.store.runs import RunStore
from dag.budget import Budgets
from dag.policy import Principal
from dag.tokens import TaskTokens
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS
from mcp_server.planner import ConformancePlanner
from tests.integration.conftest import RunningToolServer

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
C102 = {"case_id": "C-102"}


@pytest.fixture(scope="module")
def slow(start_tool_server: Any) -> RunningToolServer:
    """Each call takes 300 ms: a C-102 run (two layers of calls) lasts long enough to be waited behind."""
    server: RunningToolServer = start_tool_server(latency_ms=300)
    return server


@pytest.fixture
async def service(dsn: str, slow: RunningToolServer, token_key: bytes) -> AsyncIterator[RunService]:
    pool = await create_pool(dsn, max_size=4)
    executor = InlineExecutor(CASEOPS_TOOLS)
    deps = RunDeps(
        executor=executor,
        catalogue=CASEOPS_TOOLS,
        planners={"conformance": ConformancePlanner()},
        endpoint=ToolEndpoint(url=slow.url, tokens=TaskTokens(key=token_key, audience=slow.url)),
    )
    running = RunService(
        deps,
        pool=pool,
        toolset_planner="conformance",  # as the shipped toolsets name it
        limits=Budgets(),
        owner=f"turns-test-{uuid.uuid4().hex[:6]}",
        max_active_runs=1,
    )
    yield running
    await running.close()
    await executor.aclose()
    await pool.close()


async def submitted(service: RunService) -> str:
    result = await service.submit(RunRequest(principal=PRINCIPAL, resource=C102))
    assert result.outcome is Submission.CREATED
    assert result.run_id is not None
    return result.run_id


async def kinds(store: RunStore, run_id: str) -> list[str]:
    return [stored.event.kind for stored in await store.events(run_id)]


async def test_runs_past_the_limit_are_accepted_owned_and_driven_in_turn(
    service: RunService, store: RunStore
) -> None:
    first, second, third = [await submitted(service) for _ in range(3)]
    for _ in range(500):  # the first run's driver starts on the next turns of the loop
        if "planning_started" in await kinds(store, first):
            break
        await asyncio.sleep(0.02)

    assert service.active_runs() == 3
    assert service.waiting_runs() == 2
    for waiting in (second, third):
        assert await kinds(store, waiting) == ["run_created"]  # accepted, not planned: not its turn yet
    owners = await store._pool.fetch(  # the owner column is the lease this test is about
        "SELECT owner FROM runs WHERE run_id = ANY($1::uuid[])",
        [uuid.UUID(run) for run in (first, second, third)],
    )
    assert {row["owner"] for row in owners} == {service.owner}

    assert await service.wait(third, 60.0)
    finished = {}
    started = {}
    for run_id in (first, second, third):
        events = await store.events(run_id)
        assert events[-1].event.kind == "run_finished"
        assert events[-1].event.status.value == "completed"
        started[run_id] = next(
            stored.recorded_at for stored in events if stored.event.kind == "planning_started"
        )
        finished[run_id] = events[-1].recorded_at
    assert started[second] >= finished[first]  # one at a time, oldest first
    assert started[third] >= finished[second]


async def test_a_run_cancelled_while_it_waits_for_its_turn_ends_cancelled_without_a_plan(
    service: RunService, store: RunStore
) -> None:
    driven = await submitted(service)
    waiting = await submitted(service)

    outcome = await service.cancel(waiting)

    assert outcome is Cancellation.CANCELLED
    events = await store.events(waiting)
    assert [stored.event.kind for stored in events] == ["run_created", "run_finished"]
    assert events[-1].event.status.value == "cancelled"  # never planned: it never had a turn
    assert await service.wait(driven, 60.0)


async def test_a_run_waiting_for_its_turn_is_handed_over_untouched(
    service: RunService, store: RunStore
) -> None:
    driven = await submitted(service)
    waiting = await submitted(service)

    drained = await service.drain(grace_s=30.0)

    assert set(drained.handed_over) == {driven, waiting}
    assert await kinds(store, waiting) == ["run_created"]
    row = await store.run_row(PRINCIPAL, waiting)
    assert row is not None
    assert row["status"] == "pending"  # live, for the next supervisor to drive

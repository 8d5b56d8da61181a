"""A fault never changes a run's answer: a caller killed mid-fan-out and a database stopped mid-run end in
the fault-free result, and no node that succeeded runs again — counted on the tool server's side.

Each scenario first runs its cases without a fault (the reference), then with the fault, and compares
results; the tool server counts every call its handlers answered, by run and node (``Backend.answered``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from actors.api.views import load_state
from actors.launch.background_server import BackgroundServer
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.policy import Principal
from dag.run_state import RunState
from dag.states import NodeStatus, RunStatus
from dag.tokens import TaskTokens
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import ALL_SCOPES
from mcp_server.server import MCP_PATH, ToolServer
from tests.integration.conftest import RunningToolServer, supervisor_for

DEMO = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
OTHER = Principal("tenant-other", "test", frozenset(ALL_SCOPES))
LATENCY_MS = 800
"""Long enough for a fault to land while calls are in flight, as in the fault campaign."""


def unique(prefix: str) -> str:
    return f"raydag-test-{prefix}-{uuid.uuid4().hex[:6]}"


async def wait_until(store: RunStore, run_id: str, predicate: Any, timeout_s: float = 120) -> RunState:
    """The run's state once ``predicate`` holds (bounded: fails the test after ``timeout_s``)."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                state = await load_state(store, run_id)
            except Exception:  # the database may be down in these tests: ask again
                state = None
            if state is not None and predicate(state):
                return state
            await asyncio.sleep(0.1)


def dispatched(state: RunState, tool_prefix: str = "") -> int:
    return sum(
        1
        for node in state.nodes.values()
        if node.attempts > 0 and not node.is_group and node.tool.startswith(tool_prefix)
    )


def is_finished(state: RunState) -> bool:
    return state.status.terminal


async def submit(supervisor: Any, principal: Principal, case_id: str) -> str:
    submitted = await supervisor.submit.remote(RunRequest(principal=principal, resource={"case_id": case_id}))
    assert submitted.outcome is Submission.CREATED, submitted
    assert submitted.run_id is not None
    return str(submitted.run_id)


def assert_nothing_that_succeeded_ran_again(server: ToolServer, state: RunState, ledger: list[Any]) -> None:
    """Every node the run recorded as succeeded was answered by the tool server exactly as many times as the
    ledger says it was attempted and answered: a node whose first attempt succeeded, exactly once."""
    answered = server.answered
    first_try = {row["node_id"] for row in ledger if row["attempt"] == 1 and row["status"] == "succeeded"}
    calls = [node for node in state.nodes.values() if not node.is_group and node.attempts > 0]
    assert calls
    for node in calls:
        count = answered[f"{state.run_id}/{node.node_id}"]
        if node.status is NodeStatus.SUCCEEDED:
            assert count >= 1, node.node_id
        if node.node_id in first_try:
            assert count == 1, f"{node.node_id} succeeded on its first attempt but ran {count} times"
        assert count <= node.attempts, node.node_id


# ---------------------------------------------------------------- a caller killed mid-fan-out


async def test_a_caller_killed_mid_fan_out_gives_the_fault_free_results_for_every_tenant(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    import ray

    from actors.supervisor import NAMESPACE

    tools: RunningToolServer = start_tool_server(latency_ms=LATENCY_MS)
    name = unique("caller-kill")
    supervisor = supervisor_for(dsn, tools, token_key, name)
    try:
        reference = {}
        for principal, case_id in ((DEMO, "C-104"), (OTHER, "C-201")):
            run_id = await submit(supervisor, principal, case_id)
            reference[case_id] = await wait_until(store, run_id, is_finished)

        wide = await submit(supervisor, DEMO, "C-104")
        await wait_until(store, wide, lambda state: dispatched(state, "caseops_resolve") >= 12)
        caller = ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE)
        pid = (await caller.ping.remote())["pid"]
        os.kill(pid, signal.SIGKILL)
        other = await submit(supervisor, OTHER, "C-201")  # another tenant, right after the fault

        runs = {"C-104": wide, "C-201": other}
        for case_id, run_id in runs.items():
            state = await wait_until(store, run_id, is_finished)
            expected = reference[case_id]
            assert (state.status, state.stop_reason) == (expected.status, expected.stop_reason), state.detail
            assert state.result == expected.result
            ledger = await store.ledger(run_id)
            assert not [row for row in ledger if row["status"] == "denied"]
            assert_nothing_that_succeeded_ran_again(tools.server, state, ledger)
        killed = [
            row for row in await store.ledger(wide) if (row["error"] or {}).get("code") == "WORKER_FAILED"
        ]
        assert killed, "the kill landed on calls in flight"
    finally:
        ray.kill(supervisor)
    assert reference["C-104"].status is RunStatus.COMPLETED


# ---------------------------------------------------------------- PostgreSQL stopped mid-run


@pytest.fixture
def stoppable(restartable_database: Any, token_key: bytes) -> Iterator[tuple[Any, RunningToolServer]]:
    """A database the test may stop, and a tool server that reads it — the default layout, where the run
    store and the system of record the tools read are one PostgreSQL."""
    http = BackgroundServer(host="127.0.0.1")
    url = http.url + MCP_PATH
    tokens = TaskTokens(key=token_key, audience=url)
    server = ToolServer(
        ToolServerConfig(dsn=restartable_database.dsn, tokens=tokens, latency_ms=LATENCY_MS, pool_size=4)
    )
    http.start(server.asgi_app())
    yield restartable_database, RunningToolServer(url, server, tokens)
    http.stop()


@pytest.mark.parametrize("outage_s", [10, 30])
async def test_a_database_stopped_mid_run_gives_the_fault_free_result_at_every_moment(
    ray_cluster: None, stoppable: tuple[Any, RunningToolServer], token_key: bytes, outage_s: int
) -> None:
    import ray

    from actors.store.database import create_pool

    database, tools = stoppable
    supervisor = supervisor_for(database.dsn, tools, token_key, unique("db-outage"))
    pool = await create_pool(database.dsn, max_size=2)
    store = RunStore(pool)
    cases = {"fan-out": "C-104", "first layer": "C-102", "planning": "C-101"}
    try:
        reference = {}
        for case_id in cases.values():
            reference[case_id] = await wait_until(store, await submit(supervisor, DEMO, case_id), is_finished)

        # One outage, three moments: a run mid-fan-out, one with its first layer in flight, one just created.
        runs = {"C-104": await submit(supervisor, DEMO, "C-104")}
        await wait_until(store, runs["C-104"], lambda state: dispatched(state, "caseops_resolve") >= 12)
        runs["C-102"] = await submit(supervisor, DEMO, "C-102")
        await wait_until(store, runs["C-102"], lambda state: dispatched(state) >= 3)
        runs["C-101"] = await submit(supervisor, DEMO, "C-101")
        database.stop()
        await asyncio.sleep(outage_s)
        database.start()

        for case_id, run_id in runs.items():
            state = await wait_until(store, run_id, is_finished, timeout_s=120)
            expected = reference[case_id]
            ledger = await store.ledger(run_id)
            attempts = [(row["node_id"], row["attempt"], row["status"], row["error"]) for row in ledger]
            assert (state.status, state.stop_reason) == (expected.status, expected.stop_reason), (
                case_id,
                state.detail,
                attempts,
            )
            assert state.result == expected.result, case_id
            assert_nothing_that_succeeded_ran_again(tools.server, state, ledger)
    finally:
        await pool.close()
        ray.kill(supervisor)


async def test_the_tools_database_stopped_alone_makes_calls_wait_for_it_and_gives_the_fault_free_result(
    ray_cluster: None,
    stoppable: tuple[Any, RunningToolServer],
    dsn: str,
    token_key: bytes,
    store: RunStore,
) -> None:
    # The run store stays up: the failures reach the supervisor at once, open the tool's circuit, and the
    # calls wait for probes (rather than using up their attempts) until the database is back.
    import ray

    database, tools = stoppable
    supervisor = supervisor_for(dsn, tools, token_key, unique("tools-db-outage"))
    try:
        reference = await wait_until(store, await submit(supervisor, DEMO, "C-104"), is_finished)
        run_id = await submit(supervisor, DEMO, "C-104")
        await wait_until(store, run_id, lambda state: dispatched(state, "caseops_resolve") >= 12)
        database.stop()
        await asyncio.sleep(10)
        database.start()

        state = await wait_until(store, run_id, is_finished)
        ledger = await store.ledger(run_id)
    finally:
        ray.kill(supervisor)

    assert (state.status, state.result) == (reference.status, reference.result), state.detail
    codes = {(row["error"] or {}).get("code") for row in ledger if row["status"] == "failed"}
    # The outage was seen, and ridden out: as the tool's own error when its query met the stopped database, or
    # as the server's 503 when its token-replay check met it first (which of the two comes first is timing).
    assert codes & {"UPSTREAM_UNAVAILABLE", "HTTP_503"}, codes
    failed = [row for row in ledger if row["status"] == "failed"]
    assert len(failed) > len({row["node_id"] for row in failed})  # the circuit probed during the outage …
    assert all(state.nodes[row["node_id"]].status is NodeStatus.SUCCEEDED for row in failed)  # … and waited
    assert_nothing_that_succeeded_ran_again(tools.server, state, ledger)

"""The tool executors on the real stack — a Ray task per call, the supervisor's caller actors, the supervisor's
own loop: the same results and ledger for C-102, and the same behaviour when a call is cancelled, runs past its
time limit or loses the process making it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, assert_never

import psutil
import pytest

from actors.calls.call import ExecutorKind, ToolCall, ToolExecutor
from actors.calls.exchange import CALLS_IN_FLIGHT, DEFAULT_CALLERS, calls_per_caller
from actors.calls.executors import CallerPoolExecutor, InlineExecutor, RayToolExecutor
from actors.run.submission import Cancellation, RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE
from dag.budget import BudgetRequest
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS
from tests.c102 import C102_RESULT
from tests.integration.conftest import RunningToolServer, supervisor_for

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
SNAPSHOT = "caseops_get_case_snapshot"
HANGS_MS = 20_000
"""Longer than any of these tests: a call to a server this slow ends only by cancellation or a limit."""
LEDGER_FACTS = ("node_id", "attempt", "tool", "fingerprint", "args_hash", "decision", "status", "error")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def eventually(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        await asyncio.sleep(0.05)


def callers_of(supervisor_name: str, count: int = DEFAULT_CALLERS) -> list[Any]:
    import ray

    return [ray.get_actor(f"{supervisor_name}-tool-caller-{i}", namespace=NAMESPACE) for i in range(count)]


async def in_flight(callers: list[Any]) -> int:
    return sum([(await caller.ping.remote())["in_flight"] for caller in callers])


@pytest.fixture(scope="module")
def hanging(start_tool_server: Any) -> RunningToolServer:
    server: RunningToolServer = start_tool_server(latency_ms=HANGS_MS)
    return server


async def test_c102_reaches_the_same_result_and_ledger_with_tasks_and_with_callers(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    seen: dict[ExecutorKind, Any] = {}
    for kind in ExecutorKind:
        name = unique(f"raydag-test-{kind}")
        supervisor = supervisor_for(dsn, tool_server, token_key, name, tool_executor=kind)
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"})
        )
        assert submitted.outcome is Submission.CREATED
        assert await supervisor.wait.remote(submitted.run_id, 60.0)
        row = await store.run_row(PRINCIPAL, submitted.run_id)
        assert row is not None
        ledger = sorted(
            (tuple(entry[fact] for fact in LEDGER_FACTS) for entry in await store.ledger(submitted.run_id)),
            key=lambda entry: (entry[0], entry[1]),
        )
        outputs = {
            stored.event.node_id: stored.event.output
            for stored in await store.events(submitted.run_id)
            if stored.event.kind == "node_succeeded"
        }
        seen[kind] = (row["status"], row["result"], ledger, outputs)
        if kind is ExecutorKind.CALLERS:  # the calls were the callers' own, not Ray tasks
            pings = [await caller.ping.remote() for caller in callers_of(name)]
            assert sum(ping["calls"] for ping in pings) == 4
        ray.kill(supervisor)

    status, result, ledger, outputs = seen[ExecutorKind.TASKS]
    assert (status, result) == ("completed", C102_RESULT)
    assert [entry[0] for entry in ledger] == ["case", "docs", "policy", "resolve[0]"]
    assert seen[ExecutorKind.CALLERS] == (status, result, ledger, outputs)
    assert seen[ExecutorKind.SUPERVISOR] == (status, result, ledger, outputs)


async def test_a_supervisor_starts_its_callers_before_its_first_call(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> None:
    import ray

    name = unique("raydag-test-callers-early")
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, tool_executor=ExecutorKind.CALLERS, tool_callers=2
    )

    assert (await supervisor.ping.remote())["active_runs"] == 0

    await eventually(lambda: _exists(name, suffix="-tool-caller-1"), "both callers exist", timeout_s=10)
    pings = [await caller.ping.remote() for caller in callers_of(name, 2)]
    assert [ping["calls"] for ping in pings] == [0, 0]
    ray.kill(supervisor)


async def test_the_callers_end_with_the_supervisor_that_made_them(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> None:
    import ray

    name = unique("raydag-test-callers-owner")
    supervisor = supervisor_for(dsn, tool_server, token_key, name, tool_executor=ExecutorKind.CALLERS)
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-101"}))
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    pids = [(await caller.ping.remote())["pid"] for caller in callers_of(name)]

    ray.kill(supervisor, no_restart=True)

    def gone() -> bool:
        return not any(psutil.pid_exists(pid) for pid in pids)

    deadline = time.monotonic() + 30
    while not gone():
        assert time.monotonic() < deadline, "the callers outlived their supervisor"
        await asyncio.sleep(0.1)
    with pytest.raises(ValueError, match="look up actor"):
        callers_of(name)


async def test_cancelling_a_run_cancels_its_calls_in_the_callers(
    ray_cluster: None, dsn: str, hanging: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    name = unique("raydag-test-callers-cancel")
    supervisor = supervisor_for(
        dsn, hanging, token_key, name, tool_executor=ExecutorKind.CALLERS, tool_callers=2
    )
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))
    await eventually(lambda: _exists(name, suffix="-tool-caller-1"), "both callers exist")
    callers = callers_of(name, 2)
    await eventually(lambda: _in_flight_is(callers, 3), "case, policy and docs in flight")

    outcome = await supervisor.cancel.remote(submitted.run_id)

    assert outcome is Cancellation.CANCELLED
    await eventually(lambda: _in_flight_is(callers, 0), "the callers stopped the calls", timeout_s=5)
    row = await store.run_row(PRINCIPAL, submitted.run_id)
    assert row is not None
    assert (row["status"], row["stop_reason"]) == ("cancelled", "CANCELLED")
    kinds = [stored.event.kind for stored in await store.events(submitted.run_id)]
    assert "node_succeeded" not in kinds
    ray.kill(supervisor)


async def test_one_caller_makes_every_call_the_supervisor_has_in_flight_up_to_calls_in_flight(
    ray_cluster: None, dsn: str, hanging: RunningToolServer, token_key: bytes
) -> None:
    """The default is one caller, and it alone makes the calls a supervisor's callers make together: twelve
    C-102 runs hold 36 first-layer calls in flight at once, more than a caller's share when there were two."""
    import ray

    runs = 12
    assert DEFAULT_CALLERS == 1
    assert calls_per_caller(1) == CALLS_IN_FLIGHT > 3 * runs > calls_per_caller(2)
    name = unique("raydag-test-one-caller")
    supervisor = supervisor_for(dsn, hanging, token_key, name, tool_executor=ExecutorKind.CALLERS)
    submitted = [
        await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))
        for _ in range(runs)
    ]
    callers = callers_of(name)

    await eventually(
        lambda: _in_flight_is(callers, 3 * runs), "every first-layer call in flight", timeout_s=30
    )

    for submission in submitted:
        assert await supervisor.cancel.remote(submission.run_id) is Cancellation.CANCELLED
    await eventually(lambda: _in_flight_is(callers, 0), "the caller stopped the calls", timeout_s=10)
    ray.kill(supervisor)


async def test_the_deadline_stops_a_run_and_its_calls_in_the_callers(
    ray_cluster: None, dsn: str, hanging: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    name = unique("raydag-test-callers-deadline")
    supervisor = supervisor_for(dsn, hanging, token_key, name, tool_executor=ExecutorKind.CALLERS)
    request = RunRequest(
        principal=PRINCIPAL, resource={"case_id": "C-102"}, budgets=BudgetRequest(deadline_s=1)
    )
    submitted = await supervisor.submit.remote(request)

    assert await supervisor.wait.remote(submitted.run_id, 30.0)

    row = await store.run_row(PRINCIPAL, submitted.run_id)
    assert row is not None
    assert (row["status"], row["stop_reason"]) == ("stopped", "DEADLINE_EXCEEDED")
    await eventually(lambda: _in_flight_is(callers_of(name), 0), "the callers stopped the calls", timeout_s=5)
    ray.kill(supervisor)


def _executor(kind: ExecutorKind) -> tuple[ToolExecutor, str]:
    """An executor driven from the test process; for callers, the prefix of its actors' names."""
    prefix = unique("raydag-test-pool")
    match kind:
        case ExecutorKind.TASKS:
            return RayToolExecutor(CASEOPS_TOOLS), prefix
        case ExecutorKind.CALLERS:
            return CallerPoolExecutor(CASEOPS_TOOLS, size=1, name_prefix=prefix, namespace=NAMESPACE), prefix
        case ExecutorKind.SUPERVISOR:
            return InlineExecutor(CASEOPS_TOOLS), prefix
        case _:
            assert_never(kind)


def _snapshot_call(server: RunningToolServer, timeout_s: float) -> ToolCall:
    return ToolCall(
        run_id="executor-test",
        node_id="case",
        attempt=1,
        tool=SNAPSHOT,
        args={"case_id": "C-102"},
        mcp_url=server.url,
        token=server.token(SNAPSHOT),
        timeout_s=timeout_s,
    )


@pytest.mark.parametrize("kind", list(ExecutorKind))
async def test_a_call_past_its_time_limit_is_a_transient_timeout_with_either_executor(
    ray_cluster: None, start_tool_server: Any, tool_server: RunningToolServer, kind: ExecutorKind
) -> None:
    executor, _ = _executor(kind)
    try:
        warm = await executor.run(_snapshot_call(tool_server, timeout_s=30))  # a process to make calls is up
        assert warm.error is None, warm.error
        # A slow server of this call's own: nothing else it was sent can finish and blur its counts.
        held: RunningToolServer = start_tool_server(latency_ms=HANGS_MS)

        outcome = await executor.run(_snapshot_call(held, timeout_s=0.5))
    finally:
        if isinstance(executor, InlineExecutor):
            await executor.aclose()

    assert outcome.error is not None
    assert (outcome.error.kind.value, outcome.error.code) == ("transient", "TIMEOUT")
    assert held.server.executions == {}  # the limit ended the call, not the server's answer


async def test_a_caller_killed_mid_call_is_a_worker_failure_and_the_next_call_succeeds(
    ray_cluster: None, hanging: RunningToolServer, tool_server: RunningToolServer
) -> None:
    executor, prefix = _executor(ExecutorKind.CALLERS)
    call = asyncio.create_task(executor.run(_snapshot_call(hanging, timeout_s=30)))
    await eventually(lambda: _exists(prefix, suffix="-0"), "the caller exists")
    caller = _caller(prefix)
    await eventually(lambda: _in_flight_is([caller], 1), "the call is in flight")

    psutil.Process((await caller.ping.remote())["pid"]).kill()

    outcome = await asyncio.wait_for(call, 30)
    assert outcome.error is not None
    assert (outcome.error.kind.value, outcome.error.code) == ("transient", "WORKER_FAILED")
    await eventually(lambda: _answers(caller), "Ray restarted the caller")
    again = await executor.run(_snapshot_call(tool_server, timeout_s=10))
    assert again.error is None, again.error


async def test_calls_made_ready_together_are_handed_to_a_caller_in_one_exchange(
    ray_cluster: None, tool_server: RunningToolServer
) -> None:
    executor, prefix = _executor(ExecutorKind.CALLERS)

    outcomes = await asyncio.gather(
        *(executor.run(_snapshot_call(tool_server, timeout_s=30)) for _ in range(8))
    )

    assert [outcome.error for outcome in outcomes] == [None] * 8
    ping = await _caller(prefix).ping.remote()
    assert (ping["calls"], ping["largest_handover"]) == (8, 8)
    assert ping["exchanges"] <= 8  # one handed them over; the outcomes came back in it and in polls


async def test_an_outcome_landing_after_its_exchange_returned_still_arrives_after_a_cancellation(
    ray_cluster: None, start_tool_server: Any, hanging: RunningToolServer, tool_server: RunningToolServer
) -> None:
    executor, prefix = _executor(ExecutorKind.CALLERS)
    slow: RunningToolServer = start_tool_server(latency_ms=300)
    abandoned = asyncio.create_task(executor.run(_snapshot_call(hanging, timeout_s=30)))
    await eventually(lambda: _exists(prefix, suffix="-0"), "the caller exists")
    caller = _caller(prefix)
    await eventually(lambda: _in_flight_is([caller], 1), "the hanging call is in flight")
    abandoned.cancel()  # the exchange that handed it over was waiting for it
    await eventually(lambda: _in_flight_is([caller], 0), "the caller stopped the call", timeout_s=5)

    # Handed over together: the fast one comes back first; the slow one needs another exchange.
    fast, late = await asyncio.wait_for(
        asyncio.gather(
            executor.run(_snapshot_call(tool_server, timeout_s=30)),
            executor.run(_snapshot_call(slow, timeout_s=30)),
        ),
        10,
    )

    assert (fast.error, late.error) == (None, None)
    assert abandoned.cancelled()


def _caller(prefix: str) -> Any:
    import ray

    return ray.get_actor(f"{prefix}-0", namespace=NAMESPACE)


async def _exists(prefix: str, suffix: str = "-tool-caller-0") -> bool:
    import ray

    try:
        ray.get_actor(prefix + suffix, namespace=NAMESPACE)
    except ValueError:
        return False
    return True


async def _answers(caller: Any) -> bool:
    from ray.exceptions import RayActorError

    try:
        await caller.ping.remote()
    except RayActorError:  # ActorUnavailableError while it restarts
        return False
    return True


async def _in_flight_is(callers: list[Any], count: int) -> bool:
    return await in_flight(callers) == count


def _connections_to(pid: int, port: int) -> int:
    return sum(
        1
        for connection in psutil.Process(pid).net_connections(kind="tcp")
        if connection.raddr and connection.raddr.port == port and connection.status == psutil.CONN_ESTABLISHED
    )


async def test_cancelling_a_run_cancels_its_calls_in_the_supervisors_own_loop(
    ray_cluster: None, dsn: str, start_tool_server: Any, token_key: bytes, store: RunStore
) -> None:
    import ray

    held: RunningToolServer = start_tool_server(
        latency_ms=HANGS_MS
    )  # its own: only this run's calls reach it
    port = int(held.url.rsplit(":", 1)[1].split("/")[0])
    name = unique("raydag-test-inline-cancel")
    supervisor = supervisor_for(dsn, held, token_key, name, tool_executor=ExecutorKind.SUPERVISOR)
    pid = (await supervisor.ping.remote())["pid"]
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))

    async def three_in_flight() -> bool:
        return sum(held.server.calls.values()) == 3 and _connections_to(pid, port) >= 3

    await eventually(three_in_flight, "case, policy and docs in flight")
    outcome = await supervisor.cancel.remote(submitted.run_id)

    assert outcome is Cancellation.CANCELLED

    async def calls_closed() -> bool:  # one kept-alive connection may remain: the listing's, not a call's
        return _connections_to(pid, port) <= 1

    await eventually(calls_closed, "the calls' connections closed", timeout_s=5)
    row = await store.run_row(PRINCIPAL, submitted.run_id)
    assert row is not None
    assert (row["status"], row["stop_reason"]) == ("cancelled", "CANCELLED")
    assert held.server.executions == {}
    ray.kill(supervisor)

"""Durable runs, proved by breaking things for real: killed supervisors and workers, dropped connections,
a restarted database, concurrent duplicate requests — asserting on what PostgreSQL holds afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import psutil
import pytest

from actors.api.views import load_state
from actors.calls.call import ExecutorKind
from actors.launch.settings import shipped_toolsets
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.budget import BudgetRequest
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES
from tests.c102 import C102_RESULT
from tests.integration.conftest import DEMO_KEY, RunningToolServer, auth, supervisor_for

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
LATENCY_MS = 1_500


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def until(store: RunStore, run_id: str, predicate: Any, timeout_s: float = 60) -> list[Any]:
    """Poll the run's events until ``predicate(events)`` holds."""
    deadline = time.monotonic() + timeout_s
    while True:
        events = [stored.event for stored in await store.events(run_id)]
        if predicate(events):
            return events
        assert time.monotonic() < deadline, f"condition not reached; last event {events[-1].kind}"
        await asyncio.sleep(0.05)


def finished(events: list[Any]) -> bool:
    return events[-1].kind == "run_finished"


def kinds(events: list[Any]) -> Counter[str]:
    return Counter(event.kind for event in events)


async def attempts(store: RunStore, run_id: str) -> dict[str, list[tuple[int, str]]]:
    by_node: dict[str, list[tuple[int, str]]] = {}
    for row in sorted(await store.ledger(run_id), key=lambda row: (row["node_id"], row["attempt"])):
        by_node.setdefault(row["node_id"], []).append((row["attempt"], row["status"]))
    return by_node


@dataclass
class HeldRun:
    admin: Any
    """A connection of the test's own to the run store."""
    supervisor: Any
    run_id: str

    async def release(self) -> None:
        """Let outbox inserts through again."""
        await self.admin.execute("DROP TRIGGER IF EXISTS refuse_test_outbox ON outbox")
        await self.admin.execute("DROP FUNCTION IF EXISTS refuse_test_outbox()")

    async def resume(self) -> None:
        """Let outbox inserts through again, and have the run taken up now. The supervisor's own scan for
        runs nobody drives (every third of a lease) may have taken it up already, while the outbox still
        refused: it then drives it to its end itself, or leaves it to be taken up again."""
        await self.release()
        await self.supervisor.adopt_orphans.remote()


@contextlib.asynccontextmanager
async def held_at_join(
    dsn: str, tool_server: RunningToolServer, token_key: bytes, case_id: str, name: str
) -> AsyncIterator[HeldRun]:
    """A run of ``case_id`` that reached its join and cannot commit its end: its outbox insert fails."""
    import asyncpg
    import ray

    admin = await asyncpg.connect(dsn)
    await admin.execute(
        f"""CREATE FUNCTION refuse_test_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
               IF NEW.payload->>'case_id' = '{case_id}' THEN RAISE EXCEPTION 'outbox refused by the test'; END IF;
               RETURN NEW;
           END $$;
           CREATE TRIGGER refuse_test_outbox BEFORE INSERT ON outbox
               FOR EACH ROW EXECUTE FUNCTION refuse_test_outbox();"""
    )
    supervisor = supervisor_for(dsn, tool_server, token_key, unique(name))
    held = HeldRun(admin, supervisor, "")
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": case_id})
        )
        await supervisor.wait.remote(submitted.run_id, 30.0)
        held.run_id = submitted.run_id
        yield held
    finally:
        await held.release()
        await admin.close()
        ray.kill(supervisor)


@pytest.fixture
def slow(start_tool_server: Any) -> RunningToolServer:
    server: RunningToolServer = start_tool_server(latency_ms=LATENCY_MS)
    return server


async def test_ten_concurrent_identical_requests_make_exactly_one_run(
    api: str, tool_server: RunningToolServer
) -> None:
    key = unique("concurrent")

    async with httpx.AsyncClient(base_url=api, timeout=120) as http:
        responses = await asyncio.gather(
            *(
                http.post(
                    "/runs",
                    params={"wait": 30},
                    json={"case_id": "C-101"},
                    headers={**auth(DEMO_KEY), "Idempotency-Key": key},
                )
                for _ in range(12)
            )
        )

    statuses = Counter(response.status_code for response in responses)
    assert statuses == {201: 1, 200: 11}, statuses
    (run_id,) = {response.json()["run_id"] for response in responses}
    # Counted by the tool server, for this run only: runs of earlier tests may still be finishing beside it.
    answered = {
        task: count for task, count in tool_server.server.answered.items() if task.startswith(f"{run_id}/")
    }
    assert answered == {f"{run_id}/case": 1, f"{run_id}/policy": 1, f"{run_id}/docs": 1}


async def test_a_supervisor_killed_with_calls_in_flight_is_restarted_and_finishes_the_run(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("kill-in-flight"))
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))
    await until(store, submitted.run_id, lambda events: kinds(events)["node_dispatched"] == 3)

    ray.kill(supervisor, no_restart=False)  # Ray restarts it; it reclaims and resumes its runs

    events = await until(store, submitted.run_id, finished)
    row = await store.run_row(PRINCIPAL, submitted.run_id)
    assert row is not None
    assert (row["status"], row["result"]) == ("completed", C102_RESULT)
    assert kinds(events)["run_recovered"] == 1
    history = await attempts(store, submitted.run_id)
    for node in ("case", "policy", "docs"):  # in flight at the kill: executed again
        assert history[node] == [(1, "failed"), (2, "succeeded")]
    assert history["resolve[0]"] == [(1, "succeeded")]  # dispatched after the recovery, once
    ledger = {(row["node_id"], row["attempt"]): row for row in await store.ledger(submitted.run_id)}
    assert ledger[("case", 1)]["error"]["code"] == "SUPERVISOR_RECOVERED"
    ray.kill(supervisor)


async def test_a_ping_given_up_while_the_supervisor_boots_does_not_stop_it_from_ever_answering(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> None:
    """A readiness check gives up on its ping after 2 s; on a busy machine that is while the supervisor still
    waits for its tool callers. That must cancel the ping, not the supervisor's boot."""
    import ray

    supervisor = supervisor_for(dsn, tool_server, token_key, unique("boot"), tool_callers=6)
    try:
        await supervisor.contracts.remote()  # the actor is up, and its boot under way
        given_up = supervisor.ping.remote()
        await asyncio.sleep(0.3)  # the ping is waiting on the boot: six callers take seconds to start here
        ray.cancel(given_up)
        with contextlib.suppress(ray.exceptions.TaskCancelledError):
            await given_up
        answer = await asyncio.wait_for(supervisor.ping.remote(), 60)
    finally:
        ray.kill(supervisor)
    assert answer["owner"].startswith("boot-")


async def test_a_supervisor_process_killed_by_a_signal_does_not_rerun_what_succeeded(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("sigkill"))
    pid = (await supervisor.ping.remote())["pid"]
    request = RunRequest(
        principal=PRINCIPAL, resource={"case_id": "C-102"}, budgets=BudgetRequest(max_parallel=1)
    )
    submitted = await supervisor.submit.remote(request)
    await until(store, submitted.run_id, lambda events: kinds(events)["node_succeeded"] == 1)
    succeeded_before = {
        event.node_id
        for event in await until(store, submitted.run_id, lambda _: True)
        if event.kind == "node_succeeded"
    }

    os.kill(pid, signal.SIGKILL)

    events = await until(store, submitted.run_id, finished)
    row = await store.run_row(PRINCIPAL, submitted.run_id)
    assert row is not None
    assert (row["status"], row["result"]) == ("completed", C102_RESULT)
    history = await attempts(store, submitted.run_id)
    for node in succeeded_before:
        assert history[node] == [(1, "succeeded")], node
    assert kinds(events)["run_recovered"] == 1
    state = await load_state(store, submitted.run_id)
    assert state.recoveries == 1
    assert max(state.proposals.values()) == 1  # recovery spent no repeat budget
    ray.kill(supervisor)


async def test_a_supervisor_killed_during_the_join_joins_again_without_running_any_tool(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(
        dsn, tool_server, token_key, unique("kill-join"), planners=("tests.planners:SlowJoinPlanner",)
    )
    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, planner="slow-join")
    )
    assert submitted.outcome is Submission.CREATED
    await until(store, submitted.run_id, lambda events: events[-1].kind == "join_started")

    ray.kill(supervisor, no_restart=False)

    events = await until(store, submitted.run_id, finished)
    order = [event.kind for event in events]
    assert order.index("join_started") < order.index("run_recovered") < order.index("run_finished")
    assert events[-1].status == "completed"
    assert events[-1].result == C102_RESULT
    assert all(runs == [(1, "succeeded")] for runs in (await attempts(store, submitted.run_id)).values())
    ray.kill(supervisor)


async def test_a_supervisor_killed_right_after_accepting_a_run_still_finishes_it(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("kill-early"))
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-101"}))
    ray.kill(supervisor, no_restart=False)  # before, or while, its first nodes are dispatched

    events = await until(store, submitted.run_id, finished)
    assert events[-1].status == "completed"
    assert events[-1].result["outcome"] == "DOCUMENTS_COMPLETE"
    ray.kill(supervisor)


async def test_a_dead_supervisors_runs_are_taken_over_when_their_lease_lapses_and_not_before(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    first_name, second_name = unique("owner-a"), unique("owner-b")
    first = supervisor_for(dsn, slow, token_key, first_name, lease_s=3.0)
    second = supervisor_for(dsn, slow, token_key, second_name, lease_s=3.0)
    submitted = await first.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))
    await until(store, submitted.run_id, lambda events: kinds(events)["node_dispatched"] >= 1)
    assert submitted.run_id not in await second.adopt_orphans.remote()  # a live, renewed lease is respected

    ray.kill(first, no_restart=True)  # gone for good

    events = await until(store, submitted.run_id, finished, timeout_s=90)
    recoveries = [event for event in events if event.kind == "run_recovered"]
    # Any live supervisor may take it over (in a full test session, the API's may be first). On a loaded
    # machine a taker's first append may lose to the dead owner's last one: it then takes the run again from
    # itself, so a recovery names the dead owner or a taker, never the dead owner as the one recovering.
    assert recoveries
    takers = {event.owner for event in recoveries}
    assert first_name not in takers
    assert {event.previous_owner for event in recoveries} <= {first_name} | takers
    assert events[-1].status == "completed"
    ray.kill(second)


async def test_a_worker_killed_mid_call_is_a_transient_failure_retried_within_budget(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    # A Ray task per call: its worker process carries the task's name (a caller actor's does not).
    supervisor = supervisor_for(dsn, slow, token_key, unique("kill-worker"), tool_executor=ExecutorKind.TASKS)
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-101"}))
    await until(store, submitted.run_id, lambda events: kinds(events)["node_dispatched"] == 3)
    victim = _worker_running("tool:caseops_get_case_snapshot")  # the case node's: C-101's only snapshot

    victim.kill()

    events = await until(store, submitted.run_id, finished)
    assert events[-1].status == "completed"
    ledger = {(row["node_id"], row["attempt"]): row for row in await store.ledger(submitted.run_id)}
    assert ledger[("case", 1)]["status"] == "failed"
    assert ledger[("case", 1)]["error"]["code"] == "WORKER_FAILED"
    assert ledger[("case", 1)]["error"]["kind"] == "transient"
    # Tried again as a new call, which succeeded. On a loaded machine the attempt right after may itself fail
    # (Ray starts the worker that replaces the killed one while the call's time runs): a transient failure too.
    tried = sorted(attempt for node_id, attempt in ledger if node_id == "case")
    outcomes = {
        attempt: (ledger[("case", attempt)]["status"], ledger[("case", attempt)]["error"])
        for attempt in tried
    }
    assert ledger[("case", tried[-1])]["status"] == "succeeded", outcomes
    assert all(ledger[("case", attempt)]["error"]["kind"] == "transient" for attempt in tried[:-1]), outcomes
    ray.kill(supervisor)


def _worker_running(task_name: str, timeout_s: float = 30) -> psutil.Process:
    """The Ray worker process of this session executing ``task_name`` (Ray titles a busy worker
    ``ray::<task name>``). Only this test session's processes are searched: the session started its local
    Ray, so its workers descend from this process; other Ray sessions on the machine are not ours to kill."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if any(task_name in part for part in process.cmdline()):
                    return process
        time.sleep(0.05)
    raise AssertionError(f"no worker of this session is running {task_name}")


# ---------------------------------------------------------------- atomic terminal write, outbox, retention


async def test_a_terminal_transition_that_cannot_write_its_outbox_event_writes_nothing(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    async with held_at_join(dsn, tool_server, token_key, "C-103", "atomic") as held:
        run_id, admin = uuid.UUID(held.run_id), held.admin
        row = await admin.fetchrow("SELECT status, finished_at FROM runs WHERE run_id = $1", run_id)
        audits = await admin.fetchval("SELECT count(*) FROM audit_events WHERE run_id = $1", run_id)
        outbox = await admin.fetchval("SELECT count(*) FROM outbox WHERE run_id = $1", run_id)
        assert (row["status"], row["finished_at"], audits, outbox) == ("joining", None, 0, 0)
        assert (await until(store, held.run_id, lambda _: True))[-1].kind == "join_started"

        await held.resume()

        events = await until(store, held.run_id, finished)
        assert events[-1].status == "completed"
        terminal = await admin.fetchrow(
            """SELECT (SELECT count(*) FROM audit_events WHERE run_id = $1) AS audits,
                      (SELECT count(*) FROM outbox WHERE run_id = $1) AS outbox""",
            run_id,
        )
        assert (terminal["audits"], terminal["outbox"]) == (1, 1)


async def test_the_outbox_relay_delivers_at_least_once_with_a_stable_event_id(scratch_dsn: str) -> None:
    from actors.store.database import create_pool
    from actors.store.outbox import OutboxRelay

    run_id = await _finished_run_with_outbox_event(scratch_dsn)
    received: list[dict[str, Any]] = []

    class CrashAfterDelivery:
        """Receives the event, then fails as a relay crashing before it marks the delivery would."""

        async def deliver(self, event: Any) -> None:
            received.append(dict(event))
            if len(received) == 1:
                raise ConnectionError("the relay died after delivering")

    pool = await create_pool(scratch_dsn, max_size=2)
    try:
        relay = OutboxRelay(pool, CrashAfterDelivery())
        assert await relay.relay_once() == 0
        assert await relay.relay_once() == 1
        assert await relay.relay_once() == 0
        row = await pool.fetchrow("SELECT attempts, delivered_at FROM outbox WHERE run_id = $1", run_id)
    finally:
        await pool.close()

    assert len(received) == 2
    assert received[0] == received[1]
    assert received[0]["event_id"] == str(uuid.uuid5(run_id, "run.finished"))
    assert row["attempts"] == 2
    assert row["delivered_at"] is not None


async def test_the_webhook_sink_posts_each_event_with_its_id_as_idempotency_key(scratch_dsn: str) -> None:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from actors.launch.background_server import BackgroundServer
    from actors.store.database import create_pool
    from actors.store.outbox import OutboxRelay, WebhookSink

    run_id = await _finished_run_with_outbox_event(scratch_dsn)
    seen: list[tuple[str, dict[str, Any]]] = []

    async def hook(request: Request) -> Response:
        seen.append((request.headers["idempotency-key"], await request.json()))
        return Response(status_code=204)

    receiver = BackgroundServer()
    receiver.start(Starlette(routes=[Route("/hook", hook, methods=["POST"])]))
    pool = await create_pool(scratch_dsn, max_size=2)
    try:
        delivered = await OutboxRelay(pool, WebhookSink(receiver.url + "/hook")).relay_once()
    finally:
        await pool.close()
        receiver.stop()

    assert delivered == 1
    assert len(seen) == 1
    key, body = seen[0]
    assert key == body["event_id"] == str(uuid.uuid5(run_id, "run.finished"))
    assert (body["type"], body["run_id"], body["status"]) == ("run.finished", str(run_id), "completed")


async def _finished_run_with_outbox_event(dsn: str) -> uuid.UUID:
    """A completed run written through the real store: its terminal append writes the outbox event."""
    from actors.run.recorder import RunRecorder
    from actors.store.database import create_pool
    from dag.budget import Budgets
    from dag.events import JoinStarted, PlanAccepted, PlanningStarted, RunCreated, RunFinished
    from dag.run_state import apply
    from dag.states import RunStatus

    pool = await create_pool(dsn, max_size=2)
    try:
        store = RunStore(pool, owner="test")
        created = RunCreated(
            at=_now(),
            run_id=str(uuid.uuid4()),
            tenant_id="tenant-demo",
            subject="test",
            scopes=("cases:read",),
            resource={"case_id": "C-101"},
            goal="g",
            planner="conformance",
            budgets=Budgets(),
        )
        await store.create_run(created, idempotency_key=None, request_hash="h")
        recorder = RunRecorder(apply(None, created), 1, store)
        plan = {"nodes": [{"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-101"}}]}
        await recorder.record(
            PlanningStarted(at=_now(), round=1), PlanAccepted(at=_now(), round=1, plan=plan)
        )
        await recorder.record(JoinStarted(at=_now(), round=1))
        await recorder.record(RunFinished(at=_now(), status=RunStatus.COMPLETED, result={"ok": True}))
    finally:
        await pool.close()
    return uuid.UUID(created.run_id)


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def test_prune_removes_old_events_and_keeps_summary_and_result(dsn: str, client: httpx.Client) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import REPO, TEST_HOME

    run = client.post("/runs", params={"wait": 60}, json={"case_id": "C-101"}, headers=auth(DEMO_KEY)).json()
    asyncio.run(_age(dsn, run["run_id"], days=40))
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAYDAG_")}
    env.update(RAYDAG_DATABASE_URL=dsn, RAYDAG_HOME=str(TEST_HOME / "prune"))

    done = subprocess.run(
        [str(Path(sys.executable).parent / "raydag"), "prune", "--older-than", "30d"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "of 1 runs" in done.stdout
    summary = client.get(f"/runs/{run['run_id']}", headers=auth(DEMO_KEY))
    assert summary.status_code == 200
    assert summary.json()["result"] == run["result"]
    gone = client.get(f"/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY))
    assert gone.status_code == 410
    assert gone.json()["type"].endswith("/history-pruned")
    assert client.get(f"/runs/{run['run_id']}/events", headers=auth(DEMO_KEY)).status_code == 410


async def _age(dsn: str, run_id: str, *, days: int) -> None:
    import asyncpg

    connection = await asyncpg.connect(dsn)
    try:
        await connection.execute(
            "UPDATE runs SET finished_at = finished_at - make_interval(days => $2) WHERE run_id = $1",
            uuid.UUID(run_id),
            days,
        )
    finally:
        await connection.close()


def test_prune_refuses_a_window_it_cannot_read() -> None:
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import REPO

    done = subprocess.run(
        [str(Path(sys.executable).parent / "raydag"), "prune", "--older-than", "a while"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert "is not a duration like 30d" in done.stderr


# ---------------------------------------------------------------- PostgreSQL faults


async def test_a_run_survives_its_database_connections_being_dropped(
    ray_cluster: None, dsn: str, slow: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import asyncpg
    import ray

    supervisor = supervisor_for(dsn, slow, token_key, unique("dropped"))
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}))
    await until(store, submitted.run_id, lambda events: kinds(events)["node_dispatched"] == 3)
    admin = await asyncpg.connect(dsn)
    try:
        dropped = await admin.fetchval(
            """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
               WHERE datname = current_database() AND pid <> pg_backend_pid()"""
        )
    finally:
        await admin.close()

    events = await until(store, submitted.run_id, finished)

    assert dropped > 0
    assert events[-1].status == "completed"
    assert events[-1].result == C102_RESULT
    ray.kill(supervisor)


async def test_a_database_restart_in_the_middle_of_a_run_loses_and_duplicates_nothing(
    ray_cluster: None, restartable_database: Any, start_tool_server: Any, token_key: bytes
) -> None:
    import ray

    from actors.store.database import create_pool

    database = restartable_database
    tools = start_tool_server(latency_ms=LATENCY_MS)
    # The tool server reads the session database; only the run store restarts here.
    supervisor = supervisor_for(database.dsn, tools, token_key, unique("db-restart"))
    pool = await create_pool(database.dsn, max_size=2)
    store = RunStore(pool)
    try:
        # Warm first, as /readyz has Serve wait for it: on a loaded machine a new supervisor's callers may take
        # longer to start than a call's limit (15 s), and the first calls would time out and be made again.
        await supervisor.ping.remote()
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"})
        )
        await until(store, submitted.run_id, lambda events: kinds(events)["node_dispatched"] == 3)

        database.stop()
        await asyncio.sleep(2.0)  # calls land while the database is down; their appends wait and retry
        database.start()

        events = await until(store, submitted.run_id, finished)
        assert events[-1].status == "completed"
        assert events[-1].result == C102_RESULT
        seqs = [stored.seq for stored in await store.events(submitted.run_id)]
        assert seqs == list(range(1, len(seqs) + 1))
        tried = await attempts(store, submitted.run_id)
        errors = [
            (row["node_id"], row["attempt"], row["error"]) for row in await store.ledger(submitted.run_id)
        ]
        assert all(len(runs) == 1 for runs in tried.values()), (errors, [event.kind for event in events])
    finally:
        await pool.close()
        ray.kill(supervisor)


async def test_a_request_while_the_database_is_down_is_a_503_that_accepts_nothing(
    ray_cluster: None, restartable_database: Any, tool_server: RunningToolServer, token_key: bytes
) -> None:
    import asyncpg

    from actors.api.app import ApiConfig, create_app
    from actors.launch.background_server import BackgroundServer
    from actors.supervisor import SupervisorConfig
    from dag.budget import Budgets
    from tests.integration.conftest import TEST_API_KEYS

    database = restartable_database
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=database.dsn,
            mcp_url=tool_server.url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=shipped_toolsets(tool_server.url),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=unique("db-down-api"),
    )
    import ray

    from actors.supervisor import NAMESPACE

    http = BackgroundServer()
    http.start(create_app(config))
    supervisor = ray.get_actor(config.supervisor_name, namespace=NAMESPACE)
    try:
        async with httpx.AsyncClient(base_url=http.url, timeout=60) as client:
            database.stop()
            refused = await client.post(
                "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": "down-1"}
            )
            read = await client.get(f"/runs/{uuid.uuid4()}", headers=auth(DEMO_KEY))
            database.start()
            accepted = await client.post(
                "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": "down-1"}
            )
    finally:
        http.stop()
        ray.kill(supervisor)

    assert refused.status_code == 503
    assert refused.headers["retry-after"] == "5"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/database-unavailable")
    assert read.status_code == 503
    assert accepted.status_code == 201  # the refused request left nothing behind: its key is still fresh
    connection = await asyncpg.connect(database.dsn)
    try:
        assert await connection.fetchval("SELECT count(*) FROM runs WHERE idempotency_key = 'down-1'") == 1
    finally:
        await connection.close()


async def test_a_run_whose_stored_events_predate_resources_resumes_and_finishes_with_its_result(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    async with held_at_join(dsn, tool_server, token_key, "C-102", "old-shape") as held:
        assert (await until(store, held.run_id, lambda _: True))[-1].kind == "join_started"
        # Put its first event back in the shape events had before runs named a resource: a bare case_id.
        rewritten = await held.admin.execute(
            """UPDATE run_events
                  SET data = (data - 'resource') || jsonb_build_object('case_id', data->'resource'->>'case_id')
                WHERE run_id = $1 AND seq = 1""",
            uuid.UUID(held.run_id),
        )
        assert rewritten == "UPDATE 1"
        stored = json.loads(
            await held.admin.fetchval(
                "SELECT data FROM run_events WHERE run_id = $1 AND seq = 1", uuid.UUID(held.run_id)
            )
        )
        assert "resource" not in stored
        assert stored["case_id"] == "C-102"

        await held.resume()

        events = await until(store, held.run_id, finished)
        assert events[0].resource == {"case_id": "C-102"}
        assert events[-1].status == "completed"
        assert events[-1].result == C102_RESULT

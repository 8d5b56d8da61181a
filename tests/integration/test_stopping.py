"""SIGTERM stops every long-running command as Ctrl-C does, in order, and nothing it started outlives it.

Each test starts the command as a user would (``raydag …`` in a process session of its own), sends SIGTERM
while it works, and then checks its exit code, that every process of its session has gone, that the
embedded PostgreSQL it started is stopped, and that its port is free again. ``raydag serve`` hands its run
over mid-fan-out, and a ``raydag serve`` started again on the same database resumes it to the result a
fault-free run has.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.c102 import CASE_OUTPUT
from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, auth
from tests.integration.test_cli import RAYDAG, environment, home_fixture, raydag
from tests.integration.test_mcp_server import rpc
from tests.loopback import free_port, wait_until_ok
from tests.processes import Started, nothing_listens, postmaster, runs, wait_for
from tests.processes import started as started_command

pytestmark = pytest.mark.timeout(600)

LATENCY_MS = "1500"
"""Each tool call takes this long, so that a signal finds calls in flight."""


home = home_fixture("stopping")


def started(*args: str, env: dict[str, str], log: Path) -> AbstractContextManager[Started]:
    """``raydag ARGS`` in a process session of its own (``tests.processes.started``)."""
    return started_command([RAYDAG, *args], env=env, cwd=REPO, log=log)


def serve_env(home: Path, port: int, **extra: str) -> dict[str, str]:
    """``raydag serve`` on the embedded PostgreSQL under ``home``, on ``port``, with slow tools."""
    return environment(
        home, RAYDAG_PORT=str(port), RAYDAG_DASHBOARD="false", RAYDAG_TOOL_LATENCY_MS=LATENCY_MS, **extra
    )


def in_flight(base: str, run_id: str, prefix: str) -> bool:
    """Whether a call of a node whose id starts with ``prefix`` is out (dispatched, no outcome yet)."""
    nodes = httpx.get(f"{base}/runs/{run_id}/nodes", headers=auth(DEMO_KEY), timeout=10).json()
    return any(node["node_id"].startswith(prefix) and node["status"] == "running" for node in nodes)


@pytest.mark.embedded_pg
def test_sigterm_to_serve_mid_fan_out_hands_the_run_over_and_serve_started_again_resumes_it(
    home: Path,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    pgdata = home / "pgdata"
    seeded = raydag("seed", "--demo", env=environment(home))
    assert seeded.returncode == 0, seeded.stderr
    with started("serve", env=serve_env(home, port), log=home / "serve.log") as serve:
        wait_until_ok(base + "/readyz", within_s=150, process=serve.process, log=serve.log)
        server_pid = postmaster(pgdata)
        assert server_pid is not None, "raydag serve runs on the embedded PostgreSQL under RAYDAG_HOME"
        created = httpx.post(base + "/runs", json={"case_id": "C-104"}, headers=auth(DEMO_KEY), timeout=30)
        assert created.status_code == 201, created.text
        run = created.json()
        wait_for(
            lambda: in_flight(base, run["run_id"], "resolve["), within_s=60, what="the fan-out in flight"
        )
        # A client waiting on another run when the signal comes: its request is answered, not cut off.
        waiting: dict[str, Any] = {}
        client = threading.Thread(target=_wait_on_a_run, args=(base, waiting))
        client.start()
        wait_for(lambda: "sent" in waiting, within_s=30, what="the waiting request sent")
        threading.Event().wait(0.5)  # it reaches the replica, which waits on its run
        assert "status" not in waiting, "the request was answered before the signal"
        readiness: list[int] = []
        watcher = threading.Thread(target=_watch_readiness, args=(base, readiness, serve.process))
        watcher.start()

        assert serve.stop(signal.SIGTERM) == 0, serve.output()[-4000:]
        client.join(timeout=30)
        watcher.join(timeout=30)

    assert serve.leftovers == [], f"processes of raydag serve outlived it: {serve.leftovers}"
    assert postmaster(pgdata) is None, "the embedded PostgreSQL raydag serve started still runs"
    assert not runs(server_pid)
    assert nothing_listens(port)
    assert "SIGTERM received" not in serve.output(), "Ray's own SIGTERM handler aborted raydag serve"
    assert waiting.get("status") in (200, 201), waiting
    assert 503 in readiness, f"/readyz never said 503 while the runs were handed over: {readiness}"
    assert "runs handed over" in serve.output()

    # Started again on the same database and home: the supervisor of the same name resumes the run at once.
    with started("serve", env=serve_env(home, port), log=home / "serve-again.log") as again:
        wait_until_ok(base + "/readyz", within_s=150, process=again.process, log=again.log)
        wait_for(
            lambda: _run(base, run["run_id"])["status"] != "running",
            within_s=120,
            what="the resumed run's end",
        )
        resumed = _run(base, run["run_id"])
        fault_free = httpx.post(
            base + "/runs?wait=60", json={"case_id": "C-104"}, headers=auth(DEMO_KEY), timeout=90
        ).json()
        nodes = httpx.get(f"{base}/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY), timeout=10).json()

        assert again.stop(signal.SIGINT) == 0, again.output()[-4000:]

    assert fault_free["status"] == "completed", fault_free
    assert (resumed["status"], resumed["result"]) == ("completed", fault_free["result"])
    failed = [(node["node_id"], attempt) for node in nodes for attempt in node["history"] if attempt["error"]]
    assert failed == [], "a call in flight at the signal was recorded as failed"
    assert again.leftovers == []
    assert postmaster(pgdata) is None


def _wait_on_a_run(base: str, into: dict[str, Any]) -> None:
    """``POST /runs?wait=30``: answered when the run ends, when it is handed over, or after 30 s."""
    try:
        with httpx.Client(timeout=90) as client:
            into["sent"] = True
            created = client.post(base + "/runs?wait=30", json={"case_id": "C-102"}, headers=auth(DEMO_KEY))
            into.update(status=created.status_code, run_id=created.json().get("run_id"))
    except httpx.HTTPError as exc:
        into["error"] = repr(exc)


def _watch_readiness(base: str, statuses: list[int], process: subprocess.Popen[bytes]) -> None:
    while process.poll() is None:
        try:
            statuses.append(httpx.get(base + "/readyz", timeout=2).status_code)
        except httpx.HTTPError:
            return  # the proxy is gone
        threading.Event().wait(0.1)


def _run(base: str, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = httpx.get(f"{base}/runs/{run_id}", headers=auth(DEMO_KEY), timeout=10).json()
    return run


def test_sigterm_to_mcp_finishes_the_call_in_flight_and_exits_0(dsn: str, home: Path) -> None:
    from dag.tokens import TaskTokens
    from mcp_server.contracts import CASEOPS_TOOLS

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    key = secrets.token_urlsafe(32)
    env = environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_TOOL_LATENCY_MS="3000", RAYDAG_TOKEN_KEY=key)
    with started("mcp", "--port", str(port), env=env, log=home / "mcp.log") as mcp:
        wait_for(lambda: not nothing_listens(port), within_s=60, what="raydag mcp listening")
        tool = "caseops_get_case_snapshot"
        token = TaskTokens(key=key.encode(), audience=url).mint(
            subject="test",
            tenant_id="tenant-demo",
            task_id="stop/case/1",
            resource={"case_id": "C-102"},
            tool=tool,
            scopes=frozenset({CASEOPS_TOOLS[tool].scope}),
        )
        answer: dict[str, Any] = {}
        call = threading.Thread(target=_call, args=(url, token, tool, answer))
        call.start()
        wait_for(lambda: "sent" in answer, within_s=30, what="the call sent")
        threading.Event().wait(1.0)  # well inside its 3 s

        assert mcp.stop(signal.SIGTERM) == 0, mcp.output()
        call.join(timeout=30)

    assert answer.get("status") == 200, answer
    assert answer["result"]["structuredContent"] == CASE_OUTPUT
    assert mcp.leftovers == []
    assert nothing_listens(port)
    assert "stopped after finishing the calls in flight" in mcp.output()


def _call(url: str, token: str, tool: str, into: dict[str, Any]) -> None:
    into["sent"] = True
    try:
        response = rpc(url, token, "tools/call", {"name": tool, "arguments": {"case_id": "C-102"}})
        into.update(status=response.status_code, result=response.json().get("result"))
    except httpx.HTTPError as exc:
        into["error"] = repr(exc)


def _query(dsn: str, sql: str, *args: Any) -> list[dict[str, Any]]:
    import asyncio

    import asyncpg

    async def read() -> list[dict[str, Any]]:
        connection = await asyncpg.connect(dsn)
        try:
            return [dict(row) for row in await connection.fetch(sql, *args)]
        finally:
            await connection.close()

    return asyncio.run(read())


def _runs_of(dsn: str, owner: str) -> list[dict[str, Any]]:
    return _query(dsn, "SELECT run_id::text, status FROM runs WHERE owner = $1 ORDER BY created_at", owner)


def _run_row(dsn: str, run_id: str) -> dict[str, Any]:
    (row,) = _query(dsn, "SELECT status, owner, result FROM runs WHERE run_id = $1::uuid", run_id)
    return row


def test_sigterm_to_run_hands_the_run_over_exits_143_and_another_supervisor_finishes_it(
    dsn: str, home: Path, supervisor: Any
) -> None:
    import ray

    env = environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_TOOL_LATENCY_MS=LATENCY_MS, RAYDAG_LEASE_S="1")
    with started("run", "C-104", "--json", env=env, log=home / "run.log") as run:
        owner = f"raydag-supervisor-cli-{run.process.pid}"
        wait_for(lambda: _runs_of(dsn, owner), within_s=120, what="the run created")
        (created,) = _runs_of(dsn, owner)
        threading.Event().wait(2.0)  # its first calls are in flight

        assert run.stop(signal.SIGTERM) == 143, run.output()[-4000:]

    assert run.leftovers == [], f"processes of raydag run outlived it: {run.leftovers}"
    assert "SIGTERM received" not in run.output(), "Ray's own SIGTERM handler aborted raydag run"
    assert f"run {created['run_id']} is not finished" in run.output()
    # Its lease (1 s) lapses and a supervisor of the session takes it over: this one, now, or the API's,
    # which scans the same database, whichever claims it first.
    ray.get(supervisor.adopt_orphans.remote())
    wait_for(
        lambda: _run_row(dsn, created["run_id"])["owner"] != owner,
        within_s=60,
        what="the run taken over",
        poll_s=0.5,
    )
    assert _run_row(dsn, created["run_id"])["owner"] in {
        "raydag-test-supervisor",
        "raydag-test-api-supervisor",
    }
    wait_for(
        lambda: _run_row(dsn, created["run_id"])["status"] != "running",
        within_s=120,
        what="the run finished by its new owner",
        poll_s=0.5,
    )
    finished = _run_row(dsn, created["run_id"])
    assert finished["status"] == "completed", (
        "the interrupted process ended the run instead of handing it over"
    )
    assert json.loads(finished["result"])["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    errors = _query(
        dsn,
        "SELECT node_id, error FROM tool_ledger WHERE run_id = $1::uuid AND error IS NOT NULL",
        created["run_id"],
    )
    assert errors == [], "a call in flight at the signal was recorded as failed"


def test_sigterm_to_batch_writes_the_report_so_far_and_exits_143(dsn: str, home: Path) -> None:
    cases = home / "cases.txt"
    cases.write_text("C-101\nC-102\nC-104\n")
    env = environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_TOOL_LATENCY_MS=LATENCY_MS, COLUMNS="200")
    with started("batch", str(cases), env=env, log=home / "batch.log") as batch:
        owner = f"raydag-supervisor-cli-{batch.process.pid}"
        wait_for(lambda: len(_runs_of(dsn, owner)) == 3, within_s=120, what="the three runs created")
        threading.Event().wait(1.0)

        assert batch.stop(signal.SIGTERM) == 143, batch.output()[-4000:]

    assert batch.leftovers == [], f"processes of raydag batch outlived it: {batch.leftovers}"
    report = json.loads((home / "batch-report.json").read_text())
    assert [case["case_id"] for case in report["cases"]] == ["C-101", "C-102", "C-104"]
    interrupted = [case for case in report["cases"] if case["status"] == "interrupted"]
    assert interrupted, report
    # Handed over, not ended: each interrupted run is still the live run of a supervisor to take it up (or
    # completed on its own in the instant before the signal reached it), never stopped, failed or cancelled.
    status = {row["run_id"]: row["status"] for row in _runs_of(dsn, owner)}
    left = {case["run_id"]: status.get(case["run_id"]) for case in interrupted if case["run_id"] is not None}
    assert set(left.values()) <= {"pending", "planning", "running", "joining", "completed"}, left


@pytest.mark.embedded_pg
def test_sigterm_to_demo_stops_the_embedded_postgres_it_started_and_exits_143(home: Path) -> None:
    pgdata = home / "pgdata"
    env = environment(home, RAYDAG_TOOL_LATENCY_MS=LATENCY_MS)
    with started("demo", env=env, log=home / "demo.log") as demo:
        wait_for(lambda: "Ray up" in demo.output(), within_s=120, what="the demo started")
        server = postmaster(pgdata)
        assert server is not None
        threading.Event().wait(2.0)  # C-102's first calls are in flight

        assert demo.stop(signal.SIGTERM) == 143, demo.output()[-4000:]

    assert demo.leftovers == [], f"processes of raydag demo outlived it: {demo.leftovers}"
    assert postmaster(pgdata) is None, "the embedded PostgreSQL the demo started still runs"
    assert not runs(server)
    assert "stopped by SIGTERM" in demo.output()

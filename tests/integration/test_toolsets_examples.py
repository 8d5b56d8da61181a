"""Worked examples over servers someone else wrote, driven by the supervisor as runs: a DAG over
@modelcontextprotocol/server-everything (Streamable HTTP, the 2025-11-25 era it speaks), the bearer mode
against a server that checks the header with the secret in no event, log line or span, and one plan whose
nodes use two servers at once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from actors.launch.background_server import BackgroundServer
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE, RunSupervisor, SupervisorConfig
from actors.toolsets.config import HttpServer, Toolsets, parse_toolsets
from dag.budget import Budgets
from dag.policy import Principal
from dag.run_state import RunState
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_tracing import OtlpReceiver
from tests.integration.toolset_servers import everything_process, everything_toolsets, toy_toolsets
from tests.integration.toy_mcp_server import bearer_app

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"demo:read", "toy:read"}))
SECRET = "raydag-example-secret-7d2a0b"


@pytest.fixture(scope="module")
def everything_running(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[HttpServer, subprocess.Popen[bytes]]]:
    with everything_process(tmp_path_factory.mktemp("everything") / "server.log") as running:
        yield running


@pytest.fixture(scope="module")
def everything(everything_running: tuple[HttpServer, subprocess.Popen[bytes]]) -> HttpServer:
    return everything_running[0]


async def run_to_end(supervisor: Any, store: RunStore, plan: dict[str, Any]) -> RunState:
    from actors.api.views import load_state

    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={}, plan=plan, planner="outputs")
    )
    assert submitted.outcome is Submission.CREATED, submitted
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    return await load_state(store, submitted.run_id)


def name() -> str:
    return f"raydag-test-examples-{uuid.uuid4().hex[:6]}"


async def test_a_dag_over_server_everything_runs_as_a_run_in_the_2025_era_it_speaks(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    everything: HttpServer,
) -> None:
    import ray

    toolsets = everything_toolsets(everything.url)
    supervisor = supervisor_for(dsn, tool_server, token_key, name(), toolsets=toolsets)
    plan = {
        "nodes": [
            {"id": "sum", "tool": "get-sum", "args": {"a": 2, "b": 3}},
            {"id": "weather", "tool": "get-structured-content", "args": {"location": "Chicago"}},
            {
                "id": "echo",
                "tool": "echo",
                "args": {"message": {"$ref": "sum", "pointer": "/content/0/text"}},
            },
        ]
    }
    try:
        status = await supervisor.toolsets.remote()
        state = await run_to_end(supervisor, store, plan)
    finally:
        ray.kill(supervisor)

    # auto: server/discover refused, the 2025-11-25 handshake answered (a session, SSE responses)
    assert status["servers"]["everything"] == {"ok": True, "protocol": "2025-11-25"}
    assert (state.status.value, state.stop_reason) == ("completed", None)
    outputs = state.result["outputs"]  # type: ignore[index]
    assert outputs["sum"] == {"content": [{"type": "text", "text": "The sum of 2 and 3 is 5."}]}
    assert set(outputs["weather"]) == {"temperature", "conditions", "humidity"}  # its structured output
    assert outputs["echo"] == {"content": [{"type": "text", "text": "Echo: The sum of 2 and 3 is 5."}]}


class RawOtlpReceiver(OtlpReceiver):
    """Also keeps every export request's bytes, to search them for what must not be there."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    async def _receive(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        return await super()._receive(request)


def bearer_toolsets(url: str, secret_file: Path) -> Toolsets:
    text = f"""\
servers:
  - name: guarded
    transport: streamable-http
    url: {url}
    auth: {{mode: bearer, file: {secret_file}}}
    tools:
      echo: {{scope: toy:read, risk: read_only}}
"""
    return parse_toolsets(text, "guarded.yaml", {})


def ray_logs() -> list[Path]:
    import ray

    session = Path(ray._private.worker._global_node.get_session_dir_path())
    return [path for path in (session / "logs").rglob("*") if path.is_file()]


async def test_a_bearer_secret_reaches_the_server_and_no_event_log_line_or_span(
    ray_cluster: None, dsn: str, token_key: bytes, store: RunStore, tmp_path: Path
) -> None:
    import ray

    app = bearer_app(SECRET)
    http = BackgroundServer(host="127.0.0.1").start(app)
    secret_file = tmp_path / "guarded.token"
    secret_file.write_text(SECRET + "\n")
    receiver = RawOtlpReceiver().start()
    supervisor_name = name()
    config = SupervisorConfig(
        dsn=dsn,
        mcp_url=http.url + "/mcp",
        token_key=token_key,
        limits=Budgets(),
        toolsets=bearer_toolsets(http.url + "/mcp", secret_file),
    )
    otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    supervisor = (
        ray.remote(RunSupervisor)
        .options(
            name=supervisor_name,
            namespace=NAMESPACE,
            num_cpus=0,
            max_concurrency=100,
            runtime_env={"env_vars": otel},
        )
        .remote(config)
    )
    plan = {
        "nodes": [
            {"id": "a", "tool": "echo", "args": {"text": "first"}},
            {"id": "b", "tool": "echo", "args": {"text": {"$ref": "a", "pointer": "/text"}}},
        ]
    }
    try:
        state = await run_to_end(supervisor, store, plan)
        events = [stored.event.model_dump(mode="json") for stored in await store.events(state.run_id)]
        deadline = time.monotonic() + 30
        while not {"tool call echo", "run"} <= {span.name for span in receiver.spans}:
            assert time.monotonic() < deadline, f"spans so far: {sorted({s.name for s in receiver.spans})}"
            await asyncio.sleep(0.1)
    finally:
        ray.kill(supervisor)
        receiver.stop()
        http.stop()

    assert state.status.value == "completed"
    outputs = state.result["outputs"]  # type: ignore[index]
    assert (outputs["a"]["text"], outputs["b"]["text"]) == ("first", "first")
    assert app.seen
    assert set(app.seen) == {f"Bearer {SECRET}".encode()}  # every request carried it, listing included
    assert events
    assert SECRET not in json.dumps(events)
    assert receiver.bodies
    assert not [body for body in receiver.bodies if SECRET.encode() in body]
    logs = await asyncio.to_thread(ray_logs)
    assert logs
    assert not [path for path in logs if SECRET.encode() in path.read_bytes()]


async def test_one_plan_uses_two_servers_at_once_and_the_ledger_shows_the_calls_overlapping(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    everything_running: tuple[HttpServer, subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    import ray

    everything, process = everything_running
    everything_pid = process.pid

    toy = toy_toolsets(extra_tools="      wait_for_file: {scope: toy:read, risk: read_only}\n")
    # Tool names are one namespace across toolsets: both servers have an echo; this plan needs neither.
    summing = everything_toolsets(everything.url, "      get-sum: {scope: demo:read, risk: read_only}\n")
    toolsets = Toolsets(servers=(*summing.servers, *toy.servers))
    supervisor = supervisor_for(dsn, tool_server, token_key, name(), toolsets=toolsets)
    gate = tmp_path / "gate"
    plan = {
        "nodes": [
            {"id": "held", "tool": "wait_for_file", "args": {"path": str(gate)}},
            {"id": "sum", "tool": "get-sum", "args": {"a": 20, "b": 22}},
        ]
    }
    await supervisor.relist.remote()  # both servers listed before server-everything is held still
    # Ordered by the test, not by luck: server-everything is stopped until the toy server's call is in flight,
    # and that call is held open until server-everything's call has landed.
    os.kill(everything_pid, signal.SIGSTOP)
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={}, plan=plan, planner="outputs")
        )
        assert submitted.outcome is Submission.CREATED
        waiting = gate.with_name("gate.waiting")
        deadline = time.monotonic() + 60
        while not await asyncio.to_thread(waiting.exists):
            assert time.monotonic() < deadline, "the toy server's call did not arrive"
            await asyncio.sleep(0.05)
        os.kill(everything_pid, signal.SIGCONT)
        while not any(
            row["node_id"] == "sum" and row["status"] == "succeeded"
            for row in await store.ledger(submitted.run_id)
        ):
            assert time.monotonic() < deadline, "server-everything's call did not land"
            await asyncio.sleep(0.05)
        await asyncio.to_thread(gate.write_text, "open")
        assert await supervisor.wait.remote(submitted.run_id, 60.0)
        ledger = {row["node_id"]: row for row in await store.ledger(submitted.run_id)}
        from actors.api.views import load_state

        state = await load_state(store, submitted.run_id)
    finally:
        os.kill(everything_pid, signal.SIGCONT)
        ray.kill(supervisor)

    assert state.status.value == "completed"
    held, total = ledger["held"], ledger["sum"]
    assert (held["status"], total["status"]) == ("succeeded", "succeeded")
    assert held["started_at"] < total["finished_at"]  # the two calls were in flight at once
    assert total["started_at"] < held["finished_at"]
    assert state.result["outputs"]["sum"]["content"][0]["text"] == "The sum of 20 and 22 is 42."  # type: ignore[index]

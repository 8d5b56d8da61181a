"""A hostile MCP server changes nothing but its own node. The tests' own attacker (``hostile_mcp_server``),
over stdio and over Streamable HTTP, behind one supervisor on real Ray and PostgreSQL:

- a secret it echoes (in an error's text, its code, a JSON-RPC error, an output, its stderr) is recorded,
  logged and shown nowhere;
- its JSON-RPC error -32000 is its answer, not a lost connection: not retried, its session kept;
- an answer the client cannot use fails its call at once with its documented code, kind ``protocol``, once;
- an HTTP 500 to ``tools/call`` is reported as that, not as the refusal of an event-stream GET;
- an output over its bound fails at once without being read into memory; stderr cannot end a session or
  flood the log, and a secret written across the point where a stderr line is cut is redacted whole;
- after each attack, a normal call of the same server completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actors.api.views import load_state, read_report
from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections
from actors.calls.mcp.discovery import discover
from actors.calls.mcp.redaction import REDACTED
from actors.cli.report import report_lines
from actors.launch.background_server import BackgroundServer
from actors.run.submission import RunRequest, Submission
from actors.store.database import create_pool
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE, RunSupervisor, SupervisorConfig
from actors.toolsets.catalogue import build_catalogue
from actors.toolsets.config import BearerAuth, Toolsets, parse_toolsets
from dag.budget import Budgets
from dag.events import ErrorKind
from dag.policy import Principal
from dag.run_state import RunState
from tests.integration.conftest import RunningToolServer
from tests.integration.hostile_mcp_server import TOOLS, http_app

HOSTILE = Path(__file__).with_name("hostile_mcp_server.py")
PRINCIPAL = Principal("tenant-demo", "test", frozenset({"hostile:read"}))
CALL_S = 60.0
AT_ONCE = CALL_S / 4
"""An answer that fails "at once" fails well inside a quarter of its call timeout (which it waited out, three
attempts of it, before)."""
OUTPUT_BOUND = 65_536
SERVER_BOUND = 262_144
"""Every other tool's bound: a stdio server's lines are read up to an answer of its largest bound."""
TRANSPORTS = ["stdio", "http"]

ATTACK_TOOLS = [tool for tool in TOOLS if tool not in ("huge", "many_blocks")]
"""Declared as they are; ``huge`` and ``many_blocks`` are declared with bounds of their own."""


def _overlays(prefix: str) -> str:
    lines = [
        f"      {prefix}_{tool}: {{name: {tool}, scope: hostile:read, risk: read_only}}"
        for tool in ATTACK_TOOLS
    ]
    lines.append(
        f"      {prefix}_huge: {{name: huge, scope: hostile:read, risk: read_only, max_output_bytes: {OUTPUT_BOUND}}}"
    )
    lines.append(
        f"      {prefix}_blocks: {{name: many_blocks, scope: hostile:read, risk: read_only, max_content_blocks: 10}}"
    )
    return "\n".join(lines) + "\n"


def hostile_toolsets(url: str, bearer_file: Path, state: Path) -> Toolsets:
    text = f"""\
servers:
  - name: hostile-stdio
    transport: stdio
    command: {sys.executable}
    args: ["{HOSTILE}"]
    env: {{HOSTILE_SECRET: {{from_env: HOSTILE_SECRET}}, HOSTILE_STATE: "{state}"}}
    protocol: 2025-11-25
    timeouts: {{connect_s: 30, call_s: {CALL_S:g}}}
    max_output_bytes: {SERVER_BOUND}
    tools:
{_overlays("s")}  - name: hostile-http
    transport: streamable-http
    url: {url}
    auth: {{mode: bearer, file: {bearer_file}}}
    protocol: 2025-11-25
    timeouts: {{connect_s: 30, call_s: {CALL_S:g}}}
    max_output_bytes: {SERVER_BOUND}
    tools:
{_overlays("h")}"""
    return parse_toolsets(text, "hostile.yaml", {})


@dataclass
class Attacked:
    """The supervisor in front of both hostile servers, and what the test needs to watch them."""

    supervisor: Any
    name: str
    http: Any
    env_secret: str
    bearer_secret: str
    state: Path

    def stdio_pids(self) -> list[str]:
        """The pid of the stdio server process that answered each call, in order."""
        return [line.split()[0] for line in self.state.read_text().splitlines()]


@pytest.fixture(scope="module")
def attacked(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, tmp_path_factory: Any
) -> Iterator[Attacked]:
    import ray

    home = tmp_path_factory.mktemp("hostile")
    env_secret = f"hostile-env-{secrets.token_hex(16)}"
    bearer_secret = f"hostile-bearer-{secrets.token_hex(16)}"
    bearer_file = home / "bearer"
    bearer_file.write_text(bearer_secret)
    state = home / "calls"
    state.touch()
    app = http_app()
    http = BackgroundServer(host="127.0.0.1")
    http.start(app)
    name = f"raydag-test-hostile-{uuid.uuid4().hex[:6]}"
    config = SupervisorConfig(
        dsn=dsn,
        mcp_url=tool_server.url,
        token_key=token_key,
        limits=Budgets(),
        toolsets=hostile_toolsets(http.url + "/mcp", bearer_file, state),
        tool_callers=1,
    )
    # The stdio server's secret is a variable of the calling process: the supervisor's, and its callers'.
    supervisor = (
        ray.remote(RunSupervisor)
        .options(
            name=name,
            namespace=NAMESPACE,
            num_cpus=0,
            max_concurrency=1000,
            runtime_env={"env_vars": {"HOSTILE_SECRET": env_secret}},
        )
        .remote(config)
    )
    try:
        yield Attacked(supervisor, name, app, env_secret, bearer_secret, state)
    finally:
        ray.kill(supervisor)
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE))
        http.stop()


@dataclass
class Ran:
    state: RunState
    elapsed_s: float

    @property
    def node(self) -> Any:
        return self.state.nodes["n"]


async def run_tool(attacked: Attacked, store: RunStore, tool: str, args: dict[str, Any] | None = None) -> Ran:
    """One node calling ``tool``, run to its end."""
    plan = {"nodes": [{"id": "n", "tool": tool, "args": args or {}}]}
    started = time.monotonic()
    submitted = await attacked.supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={}, plan=plan, planner="outputs")
    )
    assert submitted.outcome is Submission.CREATED, submitted
    assert await attacked.supervisor.wait.remote(submitted.run_id, 4 * CALL_S)
    elapsed = time.monotonic() - started
    return Ran(await load_state(store, submitted.run_id), elapsed)


async def still_answers(attacked: Attacked, store: RunStore, prefix: str) -> None:
    """A normal call of the attacked server completes, in the same session."""
    ran = await run_tool(attacked, store, f"{prefix}_ok", {"text": "after"})
    assert (ran.state.status.value, ran.state.stop_reason) == ("completed", None), ran.node.error
    assert ran.node.output == {"content": [{"type": "text", "text": "after"}]}


def prefix_of(transport: str) -> str:
    return "s" if transport == "stdio" else "h"


def assert_failed_at_once(ran: Ran, code: str, kind: ErrorKind = ErrorKind.PROTOCOL) -> None:
    error = ran.node.error
    assert error is not None, ran.node
    assert (error.code, error.kind) == (code, kind), error
    assert ran.node.attempts == 1, "a protocol failure is not retried"
    assert ran.elapsed_s < AT_ONCE, f"{ran.elapsed_s:.1f}s: the call waited for an answer that had come"
    # Failure is not evidence: the outputs planner cannot complete on a node that has none.
    assert ran.state.status.value == "stopped"
    assert ran.state.stop_reason == "EVIDENCE_INCOMPLETE"


# --- 1. secrets ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_secret_the_server_echoes_reaches_no_event_row_report_or_log(
    attacked: Attacked, store: RunStore, dsn: str, transport: str
) -> None:

    prefix = prefix_of(transport)
    secret = attacked.env_secret if transport == "stdio" else attacked.bearer_secret
    expected = {
        "secret_uncoded": ("TOOL_ERROR_UNCODED", ErrorKind.PROTOCOL),
        "secret_coded": ("DENIED", ErrorKind.BUSINESS),
        "secret_in_code": ("[redacted]", ErrorKind.BUSINESS),
        "secret_rpc": ("JSONRPC_-32001", ErrorKind.PROTOCOL),
    }
    runs: list[Ran] = []
    for tool, (code, kind) in expected.items():
        ran = await run_tool(attacked, store, f"{prefix}_{tool}")
        error = ran.node.error
        assert error is not None
        assert (error.code, error.kind) == (code, kind)
        if tool != "secret_in_code":
            assert error.message.endswith("denied: you sent Authorization: Bearer [redacted]"), error.message
        runs.append(ran)
        await still_answers(attacked, store, prefix)
    echoed = await run_tool(attacked, store, f"{prefix}_secret_output")
    assert echoed.state.status.value == "completed"
    assert echoed.node.output == {
        "content": [{"type": "text", "text": "the header was [redacted], and [redacted] again"}]
    }
    runs.append(echoed)

    offered = await attacked.supervisor.contracts.remote()
    assert offered[f"{prefix}_ok"].description == "The hostile server's ok; it was sent [redacted]."
    found: list[str] = []
    for ran in runs:
        for event in await store.events(ran.state.run_id):
            if secret in event.event.model_dump_json():
                found.append(f"event {event.seq} of {ran.state.run_id}")
        catalogue = await attacked.supervisor.contracts.remote()
        report = await read_report(dsn, PRINCIPAL, ran.state.run_id, catalogue)
        printed = "\n".join(report_lines(report))
        if secret in str(report) or secret in printed:
            found.append(f"the report of {ran.state.run_id}")
    found += await rows_holding(dsn, secret)
    found += log_files_holding(secret)
    assert found == []
    if transport == "stdio":  # its stderr was read: its banner names the secret, and was shown redacted
        assert log_files_holding("my secret is [redacted]")


def log_files_holding(text: str) -> list[str]:
    """Every file of this Ray session's logs (the actors' stdout and stderr among them) holding ``text``,
    but the runtime-env agent's: it logs the environment the test gave the supervisor, secret and all."""
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return [
        str(path)
        for path in logs.rglob("*")
        if path.is_file() and path.name != "runtime_env_agent.log" and text.encode() in path.read_bytes()
    ]


async def rows_holding(dsn: str, secret: str) -> list[str]:
    """Every table of the database with a row whose text holds ``secret`` (events and ledger included)."""
    pool = await create_pool(dsn, max_size=1)
    async with pool.acquire() as connection:
        tables = await connection.fetch(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        )
        found = []
        for table in tables:
            name = f'"{table["table_schema"]}"."{table["table_name"]}"'
            hits = await connection.fetchval(
                f"SELECT count(*) FROM {name} t WHERE t::text LIKE $1", f"%{secret}%"
            )
            if hits:
                found.append(f"{hits} row(s) of {name}")
    await pool.close()
    return found


# --- 2. -32000 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_servers_own_error_32000_is_its_answer_not_a_lost_connection(
    attacked: Attacked, store: RunStore, transport: str
) -> None:
    prefix = prefix_of(transport)
    await still_answers(attacked, store, prefix)
    pids, opened = attacked.stdio_pids(), attacked.http.calls.count("initialize")

    ran = await run_tool(attacked, store, f"{prefix}_rpc_32000")

    assert_failed_at_once(ran, "JSONRPC_-32000")
    assert ran.node.error.message == "Connection closed"  # the server's words, recorded as its answer
    await still_answers(attacked, store, prefix)
    if transport == "stdio":  # the same process answered before and after: it was not restarted
        assert attacked.stdio_pids()[-1] == pids[-1]
    else:  # the session was kept: no new handshake
        assert attacked.http.calls.count("initialize") == opened


# --- 3. malformed answers ------------------------------------------------------------------------------------

MALFORMED = [
    # tool, arguments, code over stdio, code over HTTP (where the SDK's parser reads the body)
    ("deep", {"depth": 3000}, "JSONRPC_-32700", "JSONRPC_-32700"),
    ("deep", {"depth": 250}, "OUTPUT_UNSTORABLE", "JSONRPC_-32700"),
    ("surrogate", {}, "OUTPUT_UNSTORABLE", "JSONRPC_-32700"),
    ("bigint", {}, "OUTPUT_UNSTORABLE", "JSONRPC_-32700"),
    ("result_array", {}, "MALFORMED_ANSWER", "JSONRPC_-32700"),
    ("result_string", {}, "MALFORMED_ANSWER", "JSONRPC_-32700"),
    ("result_null", {}, "MALFORMED_ANSWER", "JSONRPC_-32700"),
    ("result_missing", {}, "MALFORMED_ANSWER", "JSONRPC_-32700"),
    ("no_content", {}, "MALFORMED_ANSWER", "MALFORMED_ANSWER"),
    ("content_string", {}, "MALFORMED_ANSWER", "MALFORMED_ANSWER"),
    ("unknown_block", {}, "MALFORMED_ANSWER", "MALFORMED_ANSWER"),
]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(("tool", "args", "over_stdio", "over_http"), MALFORMED)
async def test_an_answer_the_client_cannot_use_fails_its_call_at_once_with_its_code(
    attacked: Attacked,
    store: RunStore,
    transport: str,
    tool: str,
    args: dict[str, Any],
    over_stdio: str,
    over_http: str,
) -> None:
    prefix = prefix_of(transport)

    ran = await run_tool(attacked, store, f"{prefix}_{tool}", args)

    assert_failed_at_once(ran, over_stdio if transport == "stdio" else over_http)
    await still_answers(attacked, store, prefix)


async def test_a_line_on_stdout_that_answers_nothing_is_noted_and_harmless(
    attacked: Attacked, store: RunStore
) -> None:
    ran = await run_tool(attacked, store, "s_stdout_banner")

    assert ran.state.status.value == "completed"
    await still_answers(attacked, store, "s")


# --- 5. the call's own status ---------------------------------------------------------------------------------


async def test_an_http_500_to_the_call_is_reported_as_such_not_as_the_refused_event_stream(
    attacked: Attacked, store: RunStore, tmp_path: Path
) -> None:
    # The first call of a connection opens its session, whose event stream the server refuses (405).
    spec = hostile_toolsets("http://127.0.0.1:1/mcp", tmp_path / "unused", tmp_path / "state").server(
        "hostile-http"
    )
    app, http = http_app(), BackgroundServer(host="127.0.0.1")
    http.start(app)
    secret = tmp_path / "bearer"
    secret.write_text("another-bearer-secret")
    spec = spec.model_copy(update={"url": http.url + "/mcp", "auth": BearerAuth(file=secret)})
    catalogue = build_catalogue(Toolsets(servers=(spec,)), {spec.name: await discover(spec)})
    try:
        async with McpConnections([spec]) as connections:
            call = ToolCall("run", "n", 1, "h_http_500", {}, "", "", CALL_S, server=spec.name)
            first = await connections.call(call, catalogue.contracts)
    finally:
        http.stop()
    assert app.gets, "the session's event stream was asked for, and refused"
    assert first.error is not None
    assert (first.error.code, first.error.kind) == ("HTTP_500", ErrorKind.PROTOCOL)

    ran = await run_tool(attacked, store, "h_http_500")

    assert_failed_at_once(ran, "HTTP_500")
    await still_answers(attacked, store, "h")


# --- 6. outputs are bounded ------------------------------------------------------------------------------------


async def caller_peak_bytes(attacked: Attacked) -> int:
    """The high-water mark of the caller actor's resident memory (``VmHWM``)."""
    import ray

    caller = ray.get_actor(f"{attacked.name}-tool-caller-0", namespace=NAMESPACE)
    return peak_bytes((await caller.ping.remote())["pid"])


def peak_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_output_over_its_bound_fails_at_once_and_is_never_held_whole(
    attacked: Attacked, store: RunStore, transport: str
) -> None:
    prefix = prefix_of(transport)
    answer = 50 << 20
    warm = await run_tool(attacked, store, f"{prefix}_huge", {"size": 1 << 20})  # the path's first use
    assert_failed_at_once(warm, "OUTPUT_TOO_LARGE")
    before = await caller_peak_bytes(attacked)

    huge = await run_tool(attacked, store, f"{prefix}_huge", {"size": answer})

    assert_failed_at_once(huge, "OUTPUT_TOO_LARGE")
    grown = await caller_peak_bytes(attacked) - before
    assert grown < answer / 4, (
        f"the caller's peak memory grew by {grown:,} bytes for a {answer:,}-byte answer"
    )
    # Under the bytes read for a call, over the output the tool may record.
    over = await run_tool(attacked, store, f"{prefix}_huge", {"size": OUTPUT_BOUND + 1})
    assert_failed_at_once(over, "OUTPUT_TOO_LARGE")
    assert over.node.error.message.endswith(f"more than the {OUTPUT_BOUND:,} it may record")
    within = await run_tool(attacked, store, f"{prefix}_huge", {"size": OUTPUT_BOUND // 2})
    assert within.state.status.value == "completed"
    blocks = await run_tool(attacked, store, f"{prefix}_blocks", {"count": 11})
    assert_failed_at_once(blocks, "OUTPUT_TOO_LARGE")
    assert "11 content blocks, more than the 10" in blocks.node.error.message
    await still_answers(attacked, store, prefix)


# --- 7. stderr ----------------------------------------------------------------------------------------------------


def caller_log_lines(attacked: Attacked, marker: str) -> list[str]:
    import ray

    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    lines = []
    for path in logs.glob("worker-*.err"):
        lines += [line for line in path.read_text(errors="replace").splitlines() if marker in line]
    return lines


async def test_stderr_can_neither_end_the_session_nor_flood_the_log(
    attacked: Attacked, store: RunStore
) -> None:
    await still_answers(attacked, store, "s")
    pid = attacked.stdio_pids()[-1]

    long_line = await run_tool(attacked, store, "s_stderr_long_line")
    flood = await run_tool(attacked, store, "s_stderr_flood")
    await still_answers(attacked, store, "s")

    assert long_line.state.status.value == "completed"
    assert flood.state.status.value == "completed"
    assert attacked.stdio_pids()[-1] == pid, "the server was restarted: its session ended"
    await asyncio.sleep(1.0)  # Ray's log monitor reads the actor's stderr file
    cut = [line for line in caller_log_lines(attacked, "[stdio:hostile-stdio]") if "[cut: a line of" in line]
    assert cut, "the 2 MiB line was forwarded cut, and said so"
    assert all(len(line) < 3_000 for line in cut)
    forwarded = caller_log_lines(attacked, "] flood ")
    assert 0 < len(forwarded) < 2_000, f"{len(forwarded)} of 200,000 flood lines forwarded"
    dropped = caller_log_lines(attacked, "lines (")
    assert any("of stderr: too many, too fast" in line for line in dropped)


async def test_no_part_of_a_secret_survives_where_a_stderr_line_is_cut(
    attacked: Attacked, store: RunStore
) -> None:
    # The server writes its secret across the cut: 1,996 characters, then the secret.
    ran = await run_tool(attacked, store, "s_stderr_secret_at_cut")

    assert ran.state.status.value == "completed"
    await asyncio.sleep(1.0)  # Ray's log monitor reads the actor's stderr file
    before_the_cut = "P" * 8
    assert log_files_holding(before_the_cut + attacked.env_secret[:4]) == []
    assert log_files_holding(before_the_cut + REDACTED[:4]), "the line was forwarded, redacted, then cut"

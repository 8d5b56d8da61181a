"""A stdio server that dies or loses its stdout mid-call costs its own nodes one attempt, and no process of it
outlives the raydag that started it. The tests' own attacker (``hostile_mcp_server``) behind one supervisor on
real Ray and PostgreSQL, and under ``raydag.start`` in a script of its own:

- a server that exits during a call, 50 times: each lost call is ``CONNECTION_FAILED`` (transient) and asked
  again, counted at the server (one line per call it received);
- a server that closes its stdout and keeps running: its call fails as a lost connection, not after its
  timeout; the server is restarted as after an exit, the next call of that server is answered by the new
  process, and another server's node in the same run is untouched;
- a server busy in a call, with a child of its own, when ``raydag.start``'s block ends: both are gone;
- the guardian alone: killed with SIGKILL, it takes its server and the server's child with it; a server that
  closes its stdout ends it for the caller, whatever descriptors the guardian inherited.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

import actors.calls.mcp.stdio_guardian
from actors.api.views import load_state
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE
from actors.toolsets.config import Toolsets, parse_toolsets
from dag.events import ErrorKind
from dag.policy import Principal
from dag.run_state import RunState
from dag.states import NodeStatus
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_python_api import run_script

HOSTILE = Path(__file__).with_name("hostile_mcp_server.py")
PRINCIPAL = Principal("tenant-demo", "test", frozenset({"hostile:read"}))
DYING_SERVERS = 10
DEATHS_EACH = 5
"""50 deaths in all, one call in flight at each (a server admits one call at a time): ten servers restart in
parallel, each through five of its backoff's steps (0.25 s doubling) rather than one server through fifty."""
CALL_S = 20.0


def dying_toolsets(state: Path) -> Toolsets:
    servers = "".join(
        f"""\
  - name: dying-{index}
    transport: stdio
    command: {sys.executable}
    args: ["{HOSTILE}"]
    env: {{HOSTILE_STATE: "{state}"}}
    protocol: 2025-11-25
    max_concurrency: 1
    timeouts: {{connect_s: 30, call_s: {CALL_S:g}}}
    tools:
      d{index}_exit: {{name: exit_mid_call, scope: hostile:read, risk: read_only}}
      d{index}_ok: {{name: ok, scope: hostile:read, risk: read_only}}
"""
        for index in range(DYING_SERVERS)
    )
    closing = f"""\
  - name: closing
    transport: stdio
    command: {sys.executable}
    args: ["{HOSTILE}"]
    env: {{HOSTILE_STATE: "{state}"}}
    protocol: 2025-11-25
    timeouts: {{connect_s: 30, call_s: {CALL_S:g}}}
    tools:
      c_close_stdout: {{name: close_stdout, scope: hostile:read, risk: read_only, max_attempts: 1}}
      c_ok: {{name: ok, scope: hostile:read, risk: read_only}}
"""
    return parse_toolsets(f"servers:\n{servers}{closing}", "dying.yaml", {})


@dataclass
class Calls:
    """What the servers received, one line per call: ``<pid> <tool> <key>``."""

    path: Path

    def lines(self) -> list[tuple[int, str, str]]:
        rows = [line.split() for line in self.path.read_text().splitlines()]
        return [(int(row[0]), row[1], row[2]) for row in rows]


@dataclass
class Dying:
    supervisor: Any
    calls: Calls


@pytest.fixture(scope="module")
def dying(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, tmp_path_factory: Any
) -> Iterator[Dying]:
    import ray

    state = tmp_path_factory.mktemp("dying") / "calls"
    state.touch()
    name = f"raydag-test-dying-{uuid.uuid4().hex[:6]}"
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=dying_toolsets(state), tool_callers=1
    )
    try:
        yield Dying(supervisor, Calls(state))
    finally:
        ray.kill(supervisor)
        with contextlib.suppress(ValueError):
            ray.kill(ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE))


async def run_plan(dying: Dying, store: RunStore, nodes: list[dict[str, Any]]) -> RunState:
    submitted = await dying.supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={}, plan={"nodes": nodes}, planner="outputs")
    )
    assert submitted.outcome is Submission.CREATED, submitted
    assert await dying.supervisor.wait.remote(submitted.run_id, 4 * CALL_S)
    return await load_state(store, submitted.run_id)


async def test_every_call_lost_to_a_server_exiting_mid_call_is_asked_again_fifty_times_in_fifty(
    dying: Dying, store: RunStore
) -> None:
    keys = {f"k{server}-{death}": server for server in range(DYING_SERVERS) for death in range(DEATHS_EACH)}
    nodes = [{"id": key, "tool": f"d{server}_exit", "args": {"key": key}} for key, server in keys.items()]

    state = await run_plan(dying, store, nodes)

    received: defaultdict[str, list[int]] = defaultdict(list)
    for pid, tool, key in dying.calls.lines():
        if tool == "exit_mid_call":
            received[key].append(pid)
    # Counted where the calls arrive: each key's first call met the server's exit, its second a new process.
    twice = {key: pids for key, pids in received.items() if len(pids) == 2 and pids[0] != pids[1]}
    lost_once = {key: pids for key, pids in received.items() if key not in twice}
    assert set(received) == set(keys)
    assert lost_once == {}, f"{len(lost_once)} of {len(keys)} lost calls not asked again: {lost_once}"
    assert Counter((node.status, node.attempts) for node in state.nodes.values()) == Counter(
        {(NodeStatus.SUCCEEDED, 2): len(keys)}
    )
    lost = Counter((node.error.kind, node.error.code) for node in state.nodes.values() if node.error)
    assert lost == Counter({(ErrorKind.TRANSIENT, "CONNECTION_FAILED"): len(keys)})  # the first attempts'
    assert (state.status.value, state.stop_reason) == ("completed", None)


async def test_a_server_that_closes_its_stdout_loses_its_call_at_once_and_is_restarted(
    dying: Dying, store: RunStore
) -> None:
    closed = await run_plan(
        dying,
        store,
        [
            {"id": "closes", "tool": "c_close_stdout", "args": {}},
            {"id": "elsewhere", "tool": "d0_ok", "args": {"text": "elsewhere"}},
        ],
    )

    error = closed.nodes["closes"].error
    assert error is not None
    assert (error.kind, error.code) == (
        ErrorKind.TRANSIENT,
        "CONNECTION_FAILED",
    )  # not a TIMEOUT after call_s
    elsewhere = closed.nodes["elsewhere"]
    assert (elsewhere.status, elsewhere.attempts, elsewhere.error) == (NodeStatus.SUCCEEDED, 1, None)
    after = await run_plan(
        dying, store, [{"id": "after", "tool": "c_ok", "args": {"text": "after", "key": "after"}}]
    )
    assert (after.status.value, after.stop_reason) == ("completed", None), after.nodes["after"].error
    [closing_pid] = [pid for pid, tool, _ in dying.calls.lines() if tool == "close_stdout"]
    [answering_pid] = [pid for pid, tool, key in dying.calls.lines() if tool == "ok" and key == "after"]
    assert answering_pid != closing_pid, "the same process answered: it was not restarted"
    assert gone_within([closing_pid], 30), "the server that closed its stdout was left running"


def gone_within(pids: list[int], within_s: float) -> bool:
    """Whether every one of ``pids`` has exited (or is a zombie) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while any(_alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


BUSY_SCRIPT = """\
import json, os, time
from pathlib import Path
import psutil
import ray
import raydag

def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

state = Path(os.environ["BUSY_CALLS"])
ray.init()
with raydag.start() as rd:
    rd.submit({"nodes": [{"id": "busy", "tool": "busy", "args": {}}]})
    deadline = time.monotonic() + 120
    while "child=" not in state.read_text():
        assert time.monotonic() < deadline, "the busy call never reached its server"
        time.sleep(0.1)
server, _, _, child = state.read_text().split()
pids = [int(server), int(child.removeprefix("child="))]
deadline = time.monotonic() + 30  # this program and its Ray still running
while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
    time.sleep(0.1)
print(json.dumps({"pids": pids, "alive": [pid for pid in pids if alive(pid)]}))
"""


def test_a_server_busy_in_a_call_and_its_child_are_gone_once_raydag_start_has_ended(
    dsn: str, tmp_path: Path
) -> None:
    state = tmp_path / "calls"
    state.touch()
    toolsets = tmp_path / "toolsets.yaml"
    toolsets.write_text(
        f"""\
servers:
  - name: hostile
    transport: stdio
    command: {sys.executable}
    args: ["{HOSTILE}"]
    env: {{HOSTILE_STATE: "{state}"}}
    protocol: 2025-11-25
    timeouts: {{connect_s: 60, call_s: 300}}
    tools:
      busy: {{scope: hostile:read, risk: read_only}}
"""
    )
    returncode, stdout, stderr = run_script(
        BUSY_SCRIPT, dsn, tmp_path, RAYDAG_TOOLSETS=str(toolsets), BUSY_CALLS=str(state)
    )
    pids = [int(pid) for pid in state.read_text().replace("child=", "").split() if pid.isdigit()]
    try:
        assert returncode == 0, stderr[-3000:]
        answer = json.loads(stdout.strip().splitlines()[-1])
        assert answer["alive"] == [], f"still running 30 s after raydag.start's block ended: {answer['pids']}"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- the guardian alone, as a caller's event loop starts it ---------------------------------------------------

GUARDIAN = Path(actors.calls.mcp.stdio_guardian.__file__)


def guarded(
    server: str, *, extra_fds: tuple[int, ...] = (), stdout: int | None = None
) -> subprocess.Popen[bytes]:
    """The guardian running ``python -c server``, in a session of its own as ``stdio_transport`` starts it;
    ``extra_fds`` inherited besides its stdio, as uvloop (Ray's event loop) lets a child inherit them."""
    return subprocess.Popen(
        [sys.executable, "-I", str(GUARDIAN), sys.executable, "-c", server],
        stdin=subprocess.PIPE,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=extra_fds,
        start_new_session=True,
    )


def test_a_guardian_killed_takes_its_server_and_what_the_server_started_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    server = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n"
    )
    started: list[int] = []
    try:
        with guarded(server) as guardian:
            deadline = time.monotonic() + 30
            while not (pids.exists() and pids.read_text()):
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
            started = [int(pid) for pid in pids.read_text().split()]

            guardian.kill()  # SIGKILL, as Ray ends a worker's children: the guardian can do nothing

        assert gone_within(started, 30), f"outlived their guardian: {started}"
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_server_closing_its_stdout_ends_it_for_the_caller_whatever_the_guardian_inherited() -> None:
    read_end, write_end = os.pipe()
    with guarded(
        "import os, time; os.close(1); time.sleep(600)", extra_fds=(write_end,), stdout=write_end
    ) as guardian:
        os.close(write_end)
        try:
            readable, _, _ = select.select([read_end], [], [], 30)
            assert readable, "the server's stdout did not end: someone else holds it"
            assert os.read(read_end, 1) == b""
        finally:
            os.close(read_end)
            os.killpg(guardian.pid, signal.SIGTERM)

"""The ``raydag`` command line, run as a user would run it: in its own process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from actors.launch.ports import can_bind_beside
from tests.conftest import REPO, TEST_HOME
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, auth
from tests.integration.test_plan_review import decide, reviews
from tests.loopback import free_port, wait_until_ok

RAYDAG = str(Path(sys.executable).parent / "raydag")


def raydag(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAYDAG, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


LEAKED_BY_RAY = ("PYTHONBREAKPOINT",)
"""Set in this process's environment by the session's ``ray.init`` (with ``RAY_AUTH_MODE``, ``RAY_CLIENT_MODE``)."""


def environment(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without raydag's and Ray's settings (the session's Ray adds some), plus
    ``RAYDAG_HOME=home`` and ``extra``: a command under test is configured by what the test says alone."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("RAYDAG_", "RAY_")) and key not in LEAKED_BY_RAY
    }
    env.update(RAYDAG_HOME=str(home), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


def home_fixture(group: str) -> Any:
    """A ``home`` fixture: an empty ``RAYDAG_HOME`` per test, ``.raydag-test/GROUP/TEST``, kept afterwards
    (its logs are what a failure is read from)."""

    @pytest.fixture
    def home(request: pytest.FixtureRequest) -> Path:
        path = TEST_HOME / group / request.node.name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        return path

    return home


home = home_fixture("cli")


def test_run_prints_the_run_as_json_and_exits_zero(dsn: str, home: Path) -> None:
    done = raydag("run", "C-102", "--json", env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["run"]["status"] == "completed"
    assert report["run"]["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert [node["node_id"] for node in report["nodes"]] == [
        "case",
        "policy",
        "docs",
        "resolve",
        "resolve[0]",
    ]


def test_run_of_an_unknown_case_says_how_to_load_data_and_exits_2(dsn: str, home: Path) -> None:
    done = raydag("run", "C-999", env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 2
    assert "raydag seed" in done.stderr


def test_run_over_a_resource_given_as_key_value_runs_that_resource(dsn: str, home: Path) -> None:
    done = raydag(
        "run", "--resource", "case_id=C-102", "--json", env=environment(home, RAYDAG_DATABASE_URL=dsn)
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["run"]["resource"] == {"case_id": "C-102"}
    assert report["run"]["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"


def test_run_over_a_resource_no_tool_uses_names_the_key_and_exits_2(dsn: str, home: Path) -> None:
    done = raydag("run", "--resource", "root=/srv/reports", env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 2, done.stdout + done.stderr
    assert "'root'" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--resource", "no-equals-sign"], id="not-key-value"),
        pytest.param(["--resource", "case_id=C-1", "--resource", "case_id=C-2"], id="a-key-twice"),
        pytest.param(["C-102", "--resource", "case_id=C-101"], id="case-and-resource-disagree"),
        pytest.param([], id="nothing-named"),
    ],
)
def test_run_with_a_malformed_resource_exits_2_before_starting_anything(args: list[str], home: Path) -> None:
    done = raydag("run", *args, env=environment(home, RAYDAG_DATABASE_URL="postgresql://unused.invalid/x"))

    assert done.returncode == 2, done.stdout + done.stderr
    assert "resource" in done.stderr or "case" in done.stderr


@pytest.mark.embedded_pg
def test_demo_boots_the_embedded_database_runs_c102_and_stops_the_database(home: Path) -> None:
    done = raydag("demo", env=environment(home))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION" in done.stdout
    assert "evidence://C-102/DOC-C102-003@1" in done.stdout
    assert (home / "pgdata" / "PG_VERSION").exists()
    assert not (home / "pgdata" / "postmaster.pid").exists(), (
        "the embedded server must stop when raydag exits"
    )
    assert (home / "token.key").stat().st_mode & 0o777 == 0o600


def test_seed_loads_a_file_and_reports_what_it_held(dsn: str, home: Path) -> None:
    fixture = REPO / "mcp_server" / "fixtures" / "demo.json"

    done = raydag("seed", str(fixture), env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 0, done.stderr
    assert "6 cases" in done.stdout


def test_seed_of_a_malformed_file_is_a_clear_error(dsn: str, home: Path) -> None:
    broken = home / "broken.json"
    broken.write_text(json.dumps({"cases": [{"case_id": "C-1"}]}))

    done = raydag("seed", str(broken), env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 2
    assert "is not a valid seed file" in done.stderr
    assert "tenant_id" in done.stderr


@contextmanager
def raydag_serve(
    dsn: str, home: Path, *, poll_s: float = 0.25
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``raydag serve`` in a process of its own on a free port, once /healthz answers: the process and its base
    URL. Killed afterwards if the test has not stopped it."""
    port = free_port()
    env = environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_PORT=str(port), RAYDAG_DASHBOARD="false")
    log = home / "serve.log"
    with log.open("wb") as output:  # a file, not a pipe: a full pipe would block the server
        server = subprocess.Popen(
            [RAYDAG, "serve"], env=env, cwd=REPO, stdout=output, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ok(base + "/healthz", within_s=120, process=server, log=log, poll_s=poll_s)
        yield server, base
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)


def test_serve_answers_runs_over_http_calling_its_tools_beside_the_proxy_and_stops_on_interrupt(
    dsn: str, home: Path
) -> None:
    import re
    import signal

    import httpx
    import psutil

    with raydag_serve(dsn, home) as (server, base):
        # No RAYDAG_MCP_URL: the supervisor calls a tool server in raydag serve's own process, not /mcp.
        response = httpx.post(
            base + "/runs",
            params={"wait": 60},
            json={"case_id": "C-102"},
            headers={"Authorization": "Bearer dev-key-tenant-demo"},
            timeout=90,
        )

        assert response.status_code == 201, response.text
        assert response.json()["status"] == "completed"
        assert response.json()["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
        log = (home / "serve.log").read_text(errors="replace")
        found = re.search(r"tool calls to http://127\.0\.0\.1:(\d+)/mcp", log)
        assert found, log[-2000:]
        tools_port = int(found.group(1))
        # The callers keep their connections to it open: the calls were made there, past the proxy.
        connected = [
            link
            for link in psutil.Process(server.pid).net_connections(kind="tcp")
            if link.laddr.port == tools_port and link.status == psutil.CONN_ESTABLISHED
        ]
        assert connected, "no caller is connected to the tool server beside the proxy"
        port = int(base.rsplit(":", 1)[1])
        assert not can_bind_beside("127.0.0.1", port), "another process could bind beside raydag serve"
        assert not can_bind_beside("127.0.0.1", tools_port), "another process could bind beside its tools"
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
        assert "tool server stopped" in (home / "serve.log").read_text(errors="replace")


def test_mcp_serves_the_tools_alone_and_a_run_pointed_at_it_calls_it(dsn: str, home: Path) -> None:
    import signal
    import socket
    import time
    from datetime import datetime

    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    # Only the standalone server is slow: a run whose calls take this long made them there.
    slow = environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_TOOL_LATENCY_MS="400")
    log = home / "mcp.log"
    with log.open("wb") as output:
        server = subprocess.Popen(
            [RAYDAG, "mcp", "--port", str(port)], env=slow, cwd=REPO, stdout=output, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text(errors="replace")
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "raydag mcp did not listen within 60 s"
            time.sleep(0.2)

        done = raydag(
            "run", "C-102", "--json", env=environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_MCP_URL=url)
        )

        assert done.returncode == 0, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["run"]["status"] == "completed"
        calls = [node for node in report["nodes"] if node["started_at"] is not None]
        assert [node["node_id"] for node in calls] == ["case", "policy", "docs", "resolve[0]"]
        for node in calls:
            took = datetime.fromisoformat(node["finished_at"]) - datetime.fromisoformat(node["started_at"])
            assert took.total_seconds() >= 0.4, node
        assert url in log.read_text()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=30)


def test_mcp_without_a_database_url_says_why_and_exits_2(home: Path) -> None:
    done = raydag("mcp", env=environment(home), timeout=60)

    assert done.returncode == 2
    assert "RAYDAG_DATABASE_URL" in done.stderr


def test_serve_interrupted_as_soon_as_it_answers_stops_cleanly(dsn: str, home: Path) -> None:
    """Ctrl-C the moment the app answers, which may be before ``serve.run`` has returned in the CLI."""
    import signal

    import httpx

    with raydag_serve(dsn, home, poll_s=0.05) as (server, base):
        server.send_signal(signal.SIGINT)

        assert server.wait(timeout=60) == 0, (home / "serve.log").read_text(errors="replace")[-2000:]
        with pytest.raises(httpx.HTTPError):
            httpx.get(base + "/healthz", timeout=2)


TOY_TOOLSETS = """\
servers:
  - name: toy
    transport: stdio
    command: {python}
    args: ["{toy}"]
    timeouts: {{connect_s: 30, call_s: 10}}
    tools:
      echo: {{scope: toy:read, risk: read_only}}
"""


def test_run_takes_a_plan_of_your_own_over_the_toolsets_you_name(dsn: str, home: Path) -> None:
    toolsets = home / "toolsets.yaml"
    toy = REPO / "tests" / "integration" / "toy_mcp_server.py"
    toolsets.write_text(TOY_TOOLSETS.format(python=sys.executable, toy=toy))
    plan = home / "plan.json"
    plan.write_text(json.dumps({"nodes": [{"id": "hello", "tool": "echo", "args": {"text": "hello"}}]}))

    done = raydag(
        "run",
        "--plan",
        str(plan),
        "--planner",
        "outputs",
        "--toolsets",
        str(toolsets),
        "--json",
        env=environment(home, RAYDAG_DATABASE_URL=dsn),
    )

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["run"]["status"] == "completed"
    assert report["run"]["plan"] == {"nodes": [{"id": "hello", "tool": "echo", "args": {"text": "hello"}}]}
    assert report["run"]["result"]["outputs"]["hello"]["text"] == "hello"
    assert [node["tool"] for node in report["nodes"]] == ["echo"]


def test_a_malformed_toolsets_file_stops_the_command_naming_file_line_and_field(home: Path) -> None:
    toolsets = home / "toolsets.yaml"
    toolsets.write_text(
        TOY_TOOLSETS.format(python=sys.executable, toy="x").replace("read_only", "read_mostly")
    )

    done = raydag("run", "C-102", "--toolsets", str(toolsets), env=environment(home))

    assert done.returncode == 2
    assert f"{toolsets}:8: servers[0].tools.echo.risk:" in done.stderr.replace("\n", "")
    assert "Traceback" not in done.stderr


async def newest_cli_run(dsn: str, since: float) -> str | None:
    """The newest run a command line created on ``dsn`` since ``since`` (a Unix time)."""
    connection = await asyncpg.connect(dsn)
    try:
        found: str | None = await connection.fetchval(
            """SELECT run_id::text FROM runs WHERE subject LIKE 'cli:%' AND created_at >= to_timestamp($1)
               ORDER BY created_at DESC LIMIT 1""",
            since,
        )
        return found
    finally:
        await connection.close()


def test_raydag_run_of_stage_act_sends_once_a_person_approves_through_the_api_on_its_database(
    client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    """``raydag run C-103 --stage act``: the run drafts a request for the missing document and its send waits
    for a person, who approves it through the API on the same database; the send goes out once."""
    from tests.integration.test_operations import SEND, operations, sent
    from tests.integration.test_operations import decide as decide_operation

    started = time.time()
    process = subprocess.Popen(
        [RAYDAG, "run", "C-103", "--stage", "act", "--json"],
        cwd=tmp_path,
        env=environment(tmp_path / "home", RAYDAG_DATABASE_URL=dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (run_id := asyncio.run(newest_cli_run(dsn, started))) is None or SEND not in operations(
            client, run_id
        ):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never proposed its send"
            time.sleep(0.25)
        send = operations(client, run_id)[SEND]
        assert decide_operation(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        stdout, stderr = process.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):  # its own Ray included: nothing stays behind
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert (report["run"]["run_id"], report["run"]["status"]) == (run_id, "completed")
    assert sent(dsn, send) == 1


def test_raydag_run_review_waits_for_a_person_approving_through_the_api_on_its_database(
    client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    """``raydag run --review`` (a job on a cluster, say) runs its own supervisor over the deployment's database;
    a person approves through the API on that database. Nothing is dispatched before."""
    started = time.time()
    process = subprocess.Popen(
        [RAYDAG, "run", "C-102", "--review", "--json"],
        cwd=tmp_path,
        env=environment(tmp_path / "home", RAYDAG_DATABASE_URL=dsn),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (run_id := asyncio.run(newest_cli_run(dsn, started))) is None or not reviews(client, run_id):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never asked for its review"
            time.sleep(0.25)
        [review] = reviews(client, run_id)
        nodes = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()
        assert {node["status"] for node in nodes} == {"pending"}, nodes  # nothing ran before the yes
        assert decide(client, run_id, review, "approve", APPROVER_KEY).status_code == 200
        stdout, stderr = process.communicate(timeout=180)
    finally:
        with contextlib.suppress(ProcessLookupError):  # its own Ray included: nothing stays behind
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    report = json.loads(stdout)
    assert (report["run"]["run_id"], report["run"]["status"]) == (run_id, "completed")
    assert f"run {run_id}: each plan waits for a person's yes" in stderr

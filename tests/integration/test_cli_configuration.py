"""A configuration mistake ends a ``raydag`` command before it starts anything: one line on stderr naming the
setting and what is wrong, exit 2, and neither Ray nor PostgreSQL started (no Ray session directory under the
command's ``TMPDIR``, no embedded database under its ``RAYDAG_HOME``). So does a plan of one's own that the
supervisor would certainly refuse, in the words of the API's refusal."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.conftest import DEMO_KEY, auth
from tests.integration.test_cli import environment, raydag


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port bound by this test and never listened on: a connection to it is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def configured(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The command's environment: ``RAYDAG_HOME`` and ``TMPDIR`` (where a Ray it started would put its
    session) of this test's own, and ``settings``."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return environment(tmp_path / "home", TMPDIR=str(tmp_path / "tmp"), **settings)


def assert_nothing_started(done: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "tmp" / "ray").exists(), "a Ray session was started"
    assert not (tmp_path / "home" / "pgdata").exists(), "the embedded PostgreSQL was started"


def assert_refused_before_starting(
    done: subprocess.CompletedProcess[str], tmp_path: Path, setting: str
) -> None:
    assert_nothing_started(done, tmp_path)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"configuration error: {setting}"), line


COMMANDS = {
    "run": ["run", "C-102"],
    "batch": ["batch", "{cases}"],
    "demo": ["demo"],
    "serve": ["serve"],
    "seed": ["seed", "--demo"],
    "prune": ["prune", "--older-than", "30d"],
    "mcp": ["mcp", "--port", "{port}"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_database_that_refuses_connections_is_named_in_one_line_before_ray_starts(
    command: str, closed_port: int, tmp_path: Path
) -> None:
    cases = tmp_path / "cases.txt"
    cases.write_text("C-102\n")
    args = [arg.format(cases=cases, port=closed_port) for arg in COMMANDS[command]]
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port}/raydag"

    done = raydag(*args, env=configured(tmp_path, RAYDAG_DATABASE_URL=dsn), timeout=120)

    assert_refused_before_starting(done, tmp_path, "RAYDAG_DATABASE_URL")
    assert f"cannot connect to 127.0.0.1:{closed_port}: connection refused" in done.stderr


@pytest.mark.parametrize(
    ("dsn", "problem"),
    [
        pytest.param("not-a-dsn", "expected postgresql://", id="not-a-url"),
        pytest.param(
            "postgresql://postgres@127.0.0.1:54x2/raydag", "the port '54x2' is not a number", id="port"
        ),
        pytest.param(
            "postgresql://postgres@127.0.0.1/raydag?sslmode=sometimes", "`sslmode` parameter", id="sslmode"
        ),
    ],
)
def test_a_database_url_that_does_not_parse_is_named_in_one_line(
    dsn: str, problem: str, tmp_path: Path
) -> None:
    done = raydag("run", "C-102", env=configured(tmp_path, RAYDAG_DATABASE_URL=dsn), timeout=120)

    assert_refused_before_starting(done, tmp_path, "RAYDAG_DATABASE_URL")
    assert problem in done.stderr


@pytest.mark.parametrize("command", ["serve", "run"])
def test_api_keys_that_are_not_json_stop_the_command_before_postgresql_and_ray_start(
    command: str, tmp_path: Path
) -> None:
    """Before: ``raydag serve`` started PostgreSQL, Ray and Serve and failed in the API's replica 13 s later."""
    args = COMMANDS[command]

    done = raydag(*args, env=configured(tmp_path, RAYDAG_API_KEYS="{broken"), timeout=120)

    assert_refused_before_starting(done, tmp_path, "RAYDAG_API_KEYS")
    assert "expected a JSON object" in done.stderr


def test_serve_off_loopback_without_api_keys_stops_before_postgresql_and_ray_start(tmp_path: Path) -> None:
    done = raydag("serve", env=configured(tmp_path, RAYDAG_HOST="0.0.0.0"), timeout=120)

    assert_refused_before_starting(done, tmp_path, "RAYDAG_HOST=0.0.0.0 is not a loopback address")


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param(
            [{"id": "case", "tool": "caseops_get_case_snapshott", "args": {}}], id="undeclared-tool"
        ),
        pytest.param(
            [{"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": {"$ref": "policy"}}}],
            id="unknown-reference",
        ),
    ],
)
def test_a_plan_the_api_would_refuse_is_refused_in_its_words_before_the_database_or_ray(
    nodes: list[dict[str, object]], client: httpx.Client, closed_port: int, tmp_path: Path
) -> None:
    """The plan's error wins over a database that is not there: nothing was started to find it."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"nodes": nodes}))
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port}/raydag"

    done = raydag("run", "C-102", "--plan", str(plan), env=configured(tmp_path, RAYDAG_DATABASE_URL=dsn))
    posted = client.post("/runs", json={"case_id": "C-102", "plan": {"nodes": nodes}}, headers=auth(DEMO_KEY))

    assert_nothing_started(done, tmp_path)
    assert posted.status_code == 422, posted.text
    problem = posted.json()
    headline, where = done.stderr.strip().splitlines()
    assert headline == f"no run was started ({problem['type'].rsplit('/', 1)[-1]}): {problem['detail']}"
    error = problem["plan_error"]
    assert (
        where
        == f"  plan_error: code {error['code']}, node_id {error['node_id']}, location {error['location']}"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        pytest.param("{nodes", "cannot read the plan", id="not-json"),
        pytest.param("[1, 2]", "is not a JSON object", id="not-an-object"),
        pytest.param('{"nodes": "case"}', "no run was started (plan-invalid)", id="nodes-not-a-list"),
        pytest.param(
            '{"nodes": [{"id": "a", "tool": "caseops_get_case_snapshot", "args": {}, "extra": 1}]}',
            "/nodes/0/extra",
            id="unknown-member",
        ),
    ],
)
def test_a_malformed_plan_file_is_refused_before_the_database_or_ray(
    content: str, said: str, closed_port: int, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(content)
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port}/raydag"

    done = raydag("run", "C-102", "--plan", str(plan), env=configured(tmp_path, RAYDAG_DATABASE_URL=dsn))

    assert_nothing_started(done, tmp_path)
    assert said in done.stderr, done.stderr
    assert "RAYDAG_DATABASE_URL" not in done.stderr  # the plan's error, not the database it never reached

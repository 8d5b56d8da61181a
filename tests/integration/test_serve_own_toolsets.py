"""``raydag serve --toolsets FILE`` over servers of your own that raydag does not host (a stdio server here), as
the README's tour runs it: the API serves runs of a plan over them, with no tool server of raydag's beside it
and no ``/mcp`` route, and SIGTERM stops it all."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import yaml

from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, auth
from tests.integration.test_cli import RAYDAG, TOY_TOOLSETS, environment
from tests.loopback import free_port, wait_until_ok
from tests.processes import nothing_listens, started

TOY = REPO / "tests" / "integration" / "toy_mcp_server.py"


def test_serve_over_a_toolsets_file_that_hosts_no_server_runs_plans_and_stops_on_sigterm(
    dsn: str, tmp_path: Path
) -> None:
    declared = yaml.safe_load(TOY_TOOLSETS.format(python=sys.executable, toy=TOY))
    # A run through the API names a resource, and each of its keys must bind a tool's input.
    declared["servers"][0]["tools"]["echo"]["run_bound"] = {"text": "topic"}
    toolsets = tmp_path / "toolsets.yaml"
    toolsets.write_text(yaml.safe_dump(declared))
    port = free_port()
    env = environment(
        tmp_path / "home", RAYDAG_DATABASE_URL=dsn, RAYDAG_PORT=str(port), RAYDAG_DASHBOARD="false"
    )
    base = f"http://127.0.0.1:{port}"

    with started(
        [RAYDAG, "serve", "--toolsets", str(toolsets)], env=env, cwd=REPO, log=tmp_path / "serve.log"
    ) as serve:
        wait_until_ok(base + "/readyz", within_s=150, process=serve.process, log=serve.log, poll_s=0.5)

        plan = {"nodes": [{"id": "hello", "tool": "echo", "args": {"text": "over stdio"}}]}
        run = httpx.post(
            base + "/runs?wait=60",
            json={"resource": {"topic": "over stdio"}, "plan": plan},
            headers=auth(DEMO_KEY),
            timeout=90,
        )
        assert run.status_code == 201, run.text
        assert run.json()["status"] == "completed", run.json()
        assert run.json()["result"]["outputs"]["hello"]["text"] == "over stdio"
        # Nothing is hosted: no MCP endpoint in the app, no tool server beside it.
        assert httpx.post(base + "/mcp", json={}, timeout=30).status_code == 404
        assert "tool calls to" not in serve.output()

        assert serve.stop(signal.SIGTERM) == 0, serve.output()[-3000:]
        assert serve.leftovers == [], f"processes of raydag serve outlived it: {serve.leftovers}"
    assert nothing_listens(port)

"""``serve run serve_app:app`` as a user types it: a Ray of its own, configured by ``RAYDAG_*`` alone."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, auth
from tests.loopback import wait_until_ok

SERVE = Path(sys.executable).with_name("serve")
DEFAULT_PORT = 8000
"""``serve run`` of an import path always listens on 127.0.0.1:8000 (Serve's default)."""


def _port_is_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now (closed connections in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_serve_run_starts_the_api_from_the_environment(dsn: str, tmp_path: Path) -> None:
    assert _port_is_free(DEFAULT_PORT), "serve run needs 127.0.0.1:8000; something else is listening there"
    env = {
        **os.environ,
        "RAY_ADDRESS": "local",  # a Ray of its own, whatever else runs on this machine
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAYDAG_DATABASE_URL": dsn,
        "RAYDAG_TOKEN_KEY": secrets.token_urlsafe(32),
        "RAYDAG_SUPERVISOR_NAME": "raydag-test-serve-run",
        "RAYDAG_HOME": str(tmp_path),
    }
    log = tmp_path / "serve-run.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SERVE), "run", "serve_app:app"],
            cwd=REPO,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{DEFAULT_PORT}"
    try:
        wait_until_ok(base + "/readyz", within_s=150, process=process, log=log, poll_s=0.5)

        run = httpx.post(
            base + "/runs?wait=60", json={"case_id": "C-102"}, headers=auth(DEMO_KEY), timeout=90
        )
        assert run.status_code == 201, run.text
        assert run.json()["status"] == "completed"
        # The run ran on this app's own MCP endpoint, under the supervisor the environment named.
        owner = httpx.get(base + f"/runs/{run.json()['run_id']}/events", headers=auth(DEMO_KEY), timeout=30)
        assert [event["kind"] for event in owner.json()].count("node_succeeded") == 4
    finally:
        process.send_signal(signal.SIGINT)  # what Ctrl-C does: Serve and the Ray it started shut down
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    assert _port_is_free(DEFAULT_PORT), "serve run left its proxy listening after Ctrl-C"

"""``serve run serve_app:app`` as a user types it: a Ray of its own, configured by ``RAYDAG_*`` alone, on the
port ``RAYDAG_PORT`` names (a free one here), owning it, and gone entirely after Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from actors.launch.ports import can_bind_beside, ensure_free
from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, auth
from tests.loopback import free_port, wait_until_ok
from tests.processes import Session

SERVE = Path(sys.executable).with_name("serve")
STOP_S = 60


def serve_run_environment(dsn: str, home: Path, port: int) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_"))}
    env.update(
        RAY_ADDRESS="local",  # a Ray of its own, whatever else runs on this machine
        RAY_USAGE_STATS_ENABLED="0",
        RAYDAG_DATABASE_URL=dsn,
        RAYDAG_TOKEN_KEY=secrets.token_urlsafe(32),
        RAYDAG_SUPERVISOR_NAME="raydag-test-serve-run",
        RAYDAG_HOME=str(home),
        RAYDAG_PORT=str(port),
    )
    return env


def test_serve_run_starts_the_api_from_the_environment_owns_its_port_and_leaves_nothing(
    dsn: str, tmp_path: Path
) -> None:
    """Stopped by SIGTERM, which raydag turns into the KeyboardInterrupt on which `serve run` shuts down."""
    port = free_port()
    log = tmp_path / "serve-run.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(SERVE), "run", "serve_app:app"],
            cwd=REPO,
            env=serve_run_environment(dsn, tmp_path, port),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    session = Session(process)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_ok(base + "/readyz", within_s=150, process=process, log=log, poll_s=0.5)

        run = httpx.post(
            base + "/runs?wait=60", json={"case_id": "C-102"}, headers=auth(DEMO_KEY), timeout=90
        )
        assert run.status_code == 201, run.text
        assert run.json()["status"] == "completed"
        # The run ran on this app's own MCP endpoint, on the port RAYDAG_PORT named.
        events = httpx.get(base + f"/runs/{run.json()['run_id']}/events", headers=auth(DEMO_KEY), timeout=30)
        assert [event["kind"] for event in events.json()].count("node_succeeded") == 4
        assert not can_bind_beside("127.0.0.1", port), "another process could bind beside Serve's proxy"
        session.look()

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=STOP_S) == 0, log.read_text(errors="replace")[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        leftovers = session.alive()
        session.kill()

    assert leftovers == [], f"processes of serve run outlived it: {leftovers}"
    ensure_free("127.0.0.1", port)  # PortTaken if serve run left its proxy listening


def test_serve_run_refuses_a_port_another_process_listens_on_and_exits_2(dsn: str, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(SERVE), "run", "serve_app:app"],
            cwd=REPO,
            env=serve_run_environment(dsn, tmp_path, port),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"127.0.0.1:{port} is already in use by another process" in done.stderr
    assert "RAYDAG_PORT" in done.stderr

"""A Ray head of the tests' own, started with ``ray start --head`` as the README and docs/DEPLOY.md show:
``ray job submit … -- raydag run C-102 --json``, then ``serve deploy`` of the shipped ``serve_config.yaml``.

The head runs with token authentication (``RAY_AUTH_MODE=token``), the same mechanism as the README's
``~/.ray/auth_token``, but with a token file of its own (``RAY_AUTH_TOKEN_PATH``): the test neither needs nor
touches the machine's ``~/.ray/auth_token``. It lives in a temporary directory of its own under
``.raydag-test/`` and is stopped through its own ``ray start --block`` process, whose SIGTERM handler stops
exactly that node's processes; ``ray stop`` would stop every Ray on the machine (the session's, other users').
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncpg
import httpx
import psutil
import pytest

from actors.launch.ports import can_bind_beside
from tests.conftest import REPO, TEST_HOME
from tests.loopback import free_port, free_ports, wait_until_ok

pytestmark = [pytest.mark.ray_job, pytest.mark.timeout(600)]

BIN = Path(sys.executable).parent
HEAD_START_S = 120
JOB_S = 300
HEAD_STOP_S = 60


@dataclass(frozen=True)
class Head:
    dashboard: str
    temp_dir: Path
    client_env: dict[str, str]
    """The environment of a client holding the head's token (for ``ray job …``)."""
    token: str
    database_url: str

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(
            self.dashboard + path,
            params=params,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module")
def ray_head(dsn: str) -> Iterator[Head]:
    """A single-node Ray head started with ``ray start --head``, token auth on, stopped (only it) afterwards."""
    root = TEST_HOME / "jobs" / str(os.getpid())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    # Ray's Unix sockets live under its temp dir (…/session_<date>_<pid>/sockets/dash_MetricsHead) and a
    # socket path has at most 107 bytes: a checkout's path can be any length, so the temp dir is in /tmp.
    temp_dir = Path(tempfile.mkdtemp(prefix="raydag-head-"))
    token = secrets.token_hex(32)
    token_file = root / "auth_token"
    token_file.touch(mode=0o600)
    token_file.write_text(token)

    client_env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_", "RAYDAG_"))}
    client_env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file))
    # The job's driver inherits the head's environment: it finds `raydag` on PATH and the session database.
    head_env = {
        **client_env,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAYDAG_DATABASE_URL": dsn,
        "RAYDAG_HOME": str(root / "home"),
        # A single-node cluster: Ray then uses 127.0.0.1 as the node address instead of the machine's IP.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        # Nothing to drain (Serve is shut down before): stop at once on SIGTERM.
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    }
    # Every port ray start would otherwise take at a fixed default (10001, 52365, …), so that this head
    # cannot collide with another Ray on the machine.
    gcs, dashboard, agent, agent_grpc, runtime_env, metrics, client, node_manager, object_manager = (
        free_ports(9)
    )
    command = [
        str(BIN / "ray"),
        "start",
        "--head",
        "--block",
        f"--port={gcs}",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        "--num-cpus=4",
        "--include-dashboard=true",
        f"--temp-dir={temp_dir}",
        f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--runtime-env-agent-port={runtime_env}",
        f"--metrics-export-port={metrics}",
        f"--ray-client-server-port={client}",
        f"--node-manager-port={node_manager}",
        f"--object-manager-port={object_manager}",
        "--disable-usage-stats",
    ]
    log = root / "head.log"
    with log.open("wb") as output:  # a file, not a pipe: a full pipe would block the head
        process = subprocess.Popen(
            command, env=head_env, cwd=root, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    head = Head(f"http://127.0.0.1:{dashboard}", temp_dir, client_env, token, dsn)
    try:
        _wait_until_ready(head, process, log)
        yield head
    finally:
        survivors = _stop(process)
        if not survivors:
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(temp_dir, ignore_errors=True)
    assert not survivors, f"processes of the head outlived its stop and were killed: {survivors}"


def _wait_until_ready(head: Head, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + HEAD_START_S
    while True:
        assert process.poll() is None, "ray start exited:\n" + log.read_text(errors="replace")[-4000:]
        try:
            if httpx.get(head.dashboard + "/api/version", timeout=5).status_code in (200, 401):
                head.get("/api/jobs/")
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the head was not ready within {HEAD_START_S} s; see {log}"
        time.sleep(0.5)


def _stop(process: subprocess.Popen[bytes]) -> list[str]:
    """SIGTERM to ``ray start --block`` stops its node's processes; kill any of them still alive after."""
    try:
        tree = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=HEAD_STOP_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    _, alive = psutil.wait_procs(tree, timeout=HEAD_STOP_S)
    survivors = []
    for leftover in alive:
        try:
            survivors.append(f"{leftover.pid} {leftover.name()}")
            leftover.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)
    return survivors


def ray(
    head: Head, command: str, subcommand: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``ray <command> <subcommand> --address <the head's dashboard> ARGS``, as a client of the head."""
    return subprocess.run(
        [str(BIN / "ray"), command, subcommand, "--address", head.dashboard, *args],
        env=env if env is not None else head.client_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=JOB_S,
        check=False,
    )


def test_ray_job_submit_runs_c102_on_a_token_auth_head_started_with_ray_start(ray_head: Head) -> None:
    refused = httpx.get(ray_head.dashboard + "/api/jobs/", timeout=30)
    assert refused.status_code == 401, "the head must refuse a client without its token"
    without_mode = {key: value for key, value in ray_head.client_env.items() if key != "RAY_AUTH_MODE"}
    listed = ray(ray_head, "job", "list", env=without_mode)
    assert listed.returncode != 0
    assert "AuthenticationError" in listed.stdout + listed.stderr, (
        "the client sends no token without the mode"
    )
    submission_id = f"raydag-c102-{secrets.token_hex(4)}"

    done = ray(
        ray_head,
        "job",
        "submit",
        "--submission-id",
        submission_id,
        "--working-dir",
        str(REPO),
        "--",
        "raydag",
        "run",
        "C-102",
        "--json",
    )

    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    job = ray_head.get(f"/api/jobs/{submission_id}")
    assert job["status"] == "SUCCEEDED", job
    assert job["driver_exit_code"] == 0
    assert job["driver_info"]["node_ip_address"] == "127.0.0.1"
    logs = ray_head.get(f"/api/jobs/{submission_id}/logs")["logs"]
    report = _first_json_object(logs, starting='{\n  "run"')
    run = report["run"]
    assert run["case_id"] == "C-102"
    assert run["status"] == "completed"
    assert run["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert "evidence://C-102/DOC-C102-003@1" in run["result"]["evidence_refs"]

    # The driver joined this head through RAY_ADDRESS (no Ray of its own): its supervisor is this job's actor.
    actors = ray_head.get("/api/v0/actors", limit=1000, detail="false")["data"]["result"]["result"]
    supervisors = [actor for actor in actors if actor["class_name"] == "RunSupervisor"]
    assert [(actor["name"], actor["job_id"]) for actor in supervisors] == [
        (f"raydag-supervisor-cli-{job['driver_info']['pid']}", job["driver_info"]["id"])
    ]
    # …and wrote to the database named by the head's environment.
    assert _stored_status(ray_head, run["run_id"]) == "completed"

    # The working directory went up without what .gitignore excludes.
    resources = ray_head.temp_dir / "session_latest/runtime_resources/working_dir_files"
    packages = [path for path in resources.iterdir() if path.is_dir()]  # beside the downloaded .zip
    assert len(packages) == 1, packages
    uploaded = packages[0]
    assert (uploaded / "actors" / "cli" / "main.py").is_file()
    assert (uploaded / "pyproject.toml").is_file()
    for ignored in (".venv", ".raydag", ".raydag-test", ".git", "raydag.egg-info"):
        assert not (uploaded / ignored).exists(), f"{ignored} was uploaded"
    assert not list(uploaded.rglob("node_modules"))
    assert sum(path.stat().st_size for path in uploaded.rglob("*") if path.is_file()) < 20_000_000


def _first_json_object(text: str, *, starting: str) -> dict[str, Any]:
    start = text.find(starting)
    assert start >= 0, f"no JSON object starting {starting!r} in the job's logs:\n{text[-4000:]}"
    value, _ = json.JSONDecoder().raw_decode(text, start)  # ``starting`` opens an object: a dict
    return cast(dict[str, Any], value)


def _stored_status(head: Head, run_id: str) -> str:
    async def read() -> str:
        connection = await asyncpg.connect(head.database_url)
        try:
            return str(await connection.fetchval("SELECT status FROM runs WHERE run_id = $1", run_id))
        finally:
            await connection.close()

    return asyncio.run(read())


def test_serve_deploy_of_the_shipped_config_serves_runs_under_recognisable_names(
    ray_head: Head, tmp_path: Path
) -> None:
    """``serve deploy serve_config.yaml`` onto the head (the shipped file, on a free port instead of 8000)."""
    import yaml

    port = free_port()
    config = yaml.safe_load((REPO / "serve_config.yaml").read_text())
    config["http_options"]["port"] = port
    # As the config's comment says: another port means telling the replicas where their MCP endpoint is.
    config["applications"][0]["runtime_env"] = {"env_vars": {"RAYDAG_PORT": str(port)}}
    deployed = tmp_path / "serve_config.yaml"
    deployed.write_text(yaml.safe_dump(config))
    api = f"http://127.0.0.1:{port}"
    try:
        done = subprocess.run(
            [str(BIN / "serve"), "deploy", str(deployed), "--address", ray_head.dashboard],
            env=ray_head.client_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=JOB_S,
            check=False,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        wait_until_ok(api + "/readyz", within_s=180, poll_s=0.5)
        # The config's controller_options give the proxy its port alone: nothing binds beside it.
        assert not can_bind_beside("127.0.0.1", port), "another process could bind beside the proxy"

        run = httpx.post(
            api + "/runs?wait=60",
            json={"case_id": "C-102"},
            headers={"Authorization": "Bearer dev-key-tenant-demo"},
            timeout=90,
        )
        assert run.status_code == 201, run.text
        assert run.json()["status"] == "completed"
        assert _stored_status(ray_head, run.json()["run_id"]) == "completed"

        # What a person finds in the dashboard: the app and its deployment, the supervisor, the tool tasks.
        applications = ray_head.get("/api/serve/applications/")["applications"]
        assert applications["raydag"]["status"] == "RUNNING"
        assert applications["raydag"]["deployments"]["raydag-api"]["status"] == "HEALTHY"
        actors = ray_head.get("/api/v0/actors", limit=1000, detail="false")["data"]["result"]["result"]
        assert ("raydag-supervisor", "RunSupervisor") in {
            (actor["name"], actor["class_name"]) for actor in actors
        }
        tool_calls = {
            "tool:caseops_get_case_snapshot",
            "tool:caseops_get_policy_requirements",
            "tool:caseops_list_unclassified_documents",
            "tool:caseops_resolve_document_alias",
        }
        deadline = time.monotonic() + 30  # workers report task events to the head every second or so
        while True:
            tasks = ray_head.get("/api/v0/tasks", limit=1000, detail="false")["data"]["result"]["result"]
            # A caller's task is named for the tools of the calls it hands over (never a node: the names stay few).
            missing = tool_calls - {call for task in tasks for call in task["name"].split()}
            if not missing:
                break
            assert time.monotonic() < deadline, f"tool tasks not in the dashboard within 30 s: {missing}"
            time.sleep(0.5)
    finally:
        subprocess.run(
            [str(BIN / "serve"), "shutdown", "--address", ray_head.dashboard, "--yes"],
            env=ray_head.client_env,
            capture_output=True,
            timeout=JOB_S,
            check=False,
        )

"""raydag owns the ports it listens on: it refuses one another process holds (exit 2, saying which and how
to choose another), and nothing can bind beside it once it listens. Serve's default proxy would share its
port with any process of the same user (``SO_REUSEPORT``): the session's own Serve shows it, and raydag
refuses to serve there."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from actors.launch.ports import PortShared, can_bind_beside, ensure_exclusive, refuse_shared_listener
from tests.conftest import REPO
from tests.integration.test_cli import RAYDAG, environment, home_fixture, raydag
from tests.loopback import free_port
from tests.processes import nothing_listens, started, wait_for

home = home_fixture("ports")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process (this one) listens on, without SO_REUSEPORT."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


def test_serve_refuses_a_port_another_process_listens_on_before_starting_anything(
    home: Path, taken_port: int
) -> None:
    done = raydag("serve", env=environment(home, RAYDAG_PORT=str(taken_port)), timeout=60)

    assert done.returncode == 2, done.stdout + done.stderr
    assert f"127.0.0.1:{taken_port} is already in use by another process" in done.stderr
    assert "RAYDAG_PORT" in done.stderr
    assert not (home / "pgdata").exists(), "it started the embedded PostgreSQL before looking at its port"


def test_mcp_refuses_a_port_another_process_listens_on(dsn: str, home: Path, taken_port: int) -> None:
    done = raydag(
        "mcp", "--port", str(taken_port), env=environment(home, RAYDAG_DATABASE_URL=dsn), timeout=60
    )

    assert done.returncode == 2, done.stdout + done.stderr
    assert f"127.0.0.1:{taken_port} is already in use by another process" in done.stderr
    assert "--port" in done.stderr


def test_serve_s_default_proxy_lets_another_process_bind_its_port_and_raydag_calls_that_shared(
    api: str,
) -> None:
    """The session's Serve is started as Serve starts by default: the probe binds beside it."""
    port = urlsplit(api).port
    assert port is not None

    assert can_bind_beside("127.0.0.1", port)
    with pytest.raises(PortShared, match="SERVE_SOCKET_REUSE_PORT_ENABLED=0"):
        ensure_exclusive("127.0.0.1", port)
    with pytest.raises(PortShared):
        refuse_shared_listener("127.0.0.1", port)


def test_a_port_nobody_listens_on_is_not_called_shared(taken_port: int) -> None:
    with socket.socket() as idle:
        idle.bind(("127.0.0.1", 0))
        port = idle.getsockname()[1]
    refuse_shared_listener("127.0.0.1", port)  # nothing listens: nothing to judge, no error
    ensure_exclusive("127.0.0.1", taken_port)  # a plain listener (no SO_REUSEPORT) shares nothing


def test_serve_joining_a_cluster_whose_serve_shares_its_port_refuses_and_leaves_that_serve_alone(
    dsn: str, home: Path, api: str, ray_cluster: None
) -> None:
    import ray

    port = urlsplit(api).port
    assert port is not None
    gcs = ray.get_runtime_context().gcs_address
    env = environment(
        home, RAYDAG_DATABASE_URL=dsn, RAYDAG_PORT=str(port), RAY_ADDRESS=gcs, RAY_AUTH_MODE="token"
    )

    done = raydag("serve", env=env, timeout=180)

    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert f"the server on 127.0.0.1:{port} lets other processes bind the same port" in done.stderr
    assert httpx.get(api + "/readyz", timeout=30).status_code == 200, "it stopped the Serve it found running"


def test_the_shipped_serve_config_starts_proxies_that_do_not_share_their_port() -> None:
    config: dict[str, Any] = yaml.safe_load((REPO / "serve_config.yaml").read_text())

    env_vars = config["controller_options"]["runtime_env"]["env_vars"]
    assert env_vars == {"SERVE_SOCKET_REUSE_PORT_ENABLED": "0"}


def test_nothing_binds_beside_raydag_mcp(dsn: str, home: Path) -> None:
    """The reverse direction for a plain uvicorn server: ``raydag mcp`` listening, nobody binds beside it."""
    port = free_port()
    env = environment(home, RAYDAG_DATABASE_URL=dsn)
    with started([RAYDAG, "mcp", "--port", str(port)], env=env, cwd=REPO, log=home / "mcp.log") as mcp:
        wait_for(lambda: not nothing_listens(port), within_s=60, what="raydag mcp listening")
        beside = can_bind_beside("127.0.0.1", port)
        assert mcp.stop() == 0

    assert not beside, "another process could bind beside raydag mcp"

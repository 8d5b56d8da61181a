"""``raydag serve`` joined to a Ray cluster (``RAY_ADDRESS``) of a head and a worker on this machine
(``serve_cluster_script.py``): Serve's proxy and the API's replicas run on the head, one proxy that binds its
port once, and losing the worker — with a supervisor on it — while clients use the API leaves the API answering,
at worst a 503 with Retry-After, and every run it created ends completed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import REPO
from tests.integration.test_cli import environment
from tests.loopback import free_ports
from tests.processes import program_findings

SCRIPT = REPO / "tests" / "integration" / "serve_cluster_script.py"


def serve_on_a_cluster(dsn: str, folder: Path) -> dict[str, Any]:
    spec = {"ports": free_ports(3), "log": str(folder / "serve.log")}
    env = environment(
        folder / "home",
        RAYDAG_DATABASE_URL=dsn,
        RAYDAG_DASHBOARD="false",
        RAYDAG_SUPERVISOR_NAME="raydag-serve-cluster",
        RAYDAG_SUPERVISORS="2",  # one of them on the worker
        RAYDAG_REPLICAS="2",  # where Serve spreads replicas, one would be on the worker
        RAYDAG_DB_POOL_SIZE="2",  # beside the rest of the suite, within PostgreSQL's 100 connections
        RAYDAG_LEASE_S="3",
    )
    facts, _ = program_findings(SCRIPT, spec, cwd=folder, env=env, timeout_s=600)
    return facts


def test_serve_joined_to_a_cluster_keeps_its_proxy_and_api_on_the_head_and_outlives_the_worker(
    dsn: str, tmp_path: Path
) -> None:
    facts = serve_on_a_cluster(dsn, tmp_path)
    head, worker = facts["nodes"]["head"], facts["nodes"]["worker"]

    # One proxy, on the head, healthy; both replicas there too. The worker held a supervisor.
    ready = facts["ready"]
    assert {node: proxy["status"] for node, proxy in ready["proxies"].items()} == {head: "HEALTHY"}, ready
    assert ready["replicas"] == [head, head], ready
    assert worker in facts["supervisors"], facts["supervisors"]

    # The worker gone: the same proxy (never restarted) and replicas, and the API answered throughout.
    after = facts["after"]
    assert after == ready, (ready, after)
    assert facts["recovered"], (facts["http_answers"], facts["http_errors"])
    for error in facts["http_errors"]:
        assert (error["status"], bool(error.get("retry_after"))) == (503, True), facts["http_errors"]
    assert set(facts["runs"].values()) == {"completed"}, facts["runs"]

    assert facts["serve_exit"] == 0, facts["serve_log"]

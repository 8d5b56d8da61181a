"""The API as an operator meets it: readiness, bounded database connections, graceful removal."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast
from urllib.parse import urlsplit

import asyncpg
import httpx

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import shipped_toolsets
from actors.store.database import drop_database
from actors.supervisor import NAMESPACE, SupervisorConfig
from dag.budget import Budgets
from tests.c102 import C102_RESULT
from tests.integration.conftest import DEMO_KEY, TEST_API_KEYS, RunningToolServer, auth
from tests.integration.test_mcp_server import rpc
from tests.loopback import wait_until_ok


def test_readyz_reports_each_dependency_and_healthz_only_liveness(client: httpx.Client) -> None:
    ready = client.get("/readyz")

    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready"
    # Each dependency answered: it reports how fast, and no reason for a failure.
    assert {name: (check["ok"], sorted(check)) for name, check in body["checks"].items()} == {
        "database": (True, ["ms", "ok"]),
        "supervisor": (True, ["ms", "ok"]),
    }
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_is_503_naming_the_dependency_that_does_not_answer(
    ray_cluster: None, admin_dsn: str, scratch_dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> None:
    import ray

    from actors.api.app import ApiConfig, create_app
    from actors.supervisor import SupervisorConfig

    name = f"raydag-test-readyz-{uuid.uuid4().hex[:6]}"
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=scratch_dsn,
            mcp_url=tool_server.url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=shipped_toolsets(tool_server.url),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=name,
    )
    server = BackgroundServer().start(create_app(config), timeout_s=60)
    try:
        # Ready means warm: a new supervisor's tool callers take seconds to start on a busy machine, and
        # /readyz is 503 until they have (each check waits 2 s at most).
        wait_until_ok(server.url + "/readyz", within_s=60)
        with httpx.Client(base_url=server.url, timeout=30) as http:
            ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            no_supervisor = http.get("/readyz")
            assert no_supervisor.status_code == 503
            assert no_supervisor.headers["content-type"] == "application/problem+json"
            assert no_supervisor.headers["retry-after"]
            problem = no_supervisor.json()
            assert problem["type"].endswith("/not-ready")
            assert problem["detail"] == "not ready: supervisor did not answer"
            assert problem["checks"]["database"]["ok"] is True
            assert problem["checks"]["supervisor"] == {"ok": False, "reason": "ActorDiedError"}
            assert http.get("/healthz").status_code == 200  # alive, just not ready

            asyncio.run(drop_database(admin_dsn, urlsplit(scratch_dsn).path.lstrip("/")))
            neither = http.get("/readyz").json()
            assert neither["detail"] == "not ready: database, supervisor did not answer"
            assert neither["checks"]["database"]["ok"] is False
    finally:
        server.stop()


async def _max_connections_by_application(dsn: str, stop: threading.Event) -> dict[str, int]:
    """The most connections each ``application_name`` held on this database at once, sampled until ``stop``."""
    seen: dict[str, int] = {}
    connection = await asyncpg.connect(dsn)
    try:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            rows = await connection.fetch(
                """SELECT application_name, count(*) AS n FROM pg_stat_activity
                   WHERE datname = current_database() AND pid <> pg_backend_pid()
                   GROUP BY application_name"""
            )
            for row in rows:
                seen[row["application_name"]] = max(seen.get(row["application_name"], 0), row["n"])
            await asyncio.sleep(0.01)
    finally:
        await connection.close()
    return seen


def _run_as_api_md_says(http: httpx.Client, key: str) -> httpx.Response:
    """A run of C-102 posted as API.md tells a client to: a 503 (a supervisor that missed its deadline on a
    loaded machine) is posted again with the same ``Idempotency-Key`` after its ``Retry-After``."""
    for _ in range(30):
        answer = http.post("/runs?wait=60", json={"case_id": "C-102"}, headers={"Idempotency-Key": key})
        if answer.status_code != 503:
            return answer
        time.sleep(float(answer.headers["retry-after"]))
    return answer


def test_database_connections_stay_within_each_pool_under_a_burst(api: str, dsn: str) -> None:
    """48 concurrent reads and 16 concurrent runs: the API replica and its supervisor each stay within
    their pool (4), so the connection count is known in advance and can be sized against max_connections."""
    headers = auth(DEMO_KEY)
    finished = httpx.post(f"{api}/runs?wait=30", json={"case_id": "C-102"}, headers=headers, timeout=60)
    run_id = finished.json()["run_id"]

    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=65) as pool:
        sampling = pool.submit(asyncio.run, _max_connections_by_application(dsn, stop))
        with httpx.Client(base_url=api, headers=headers, timeout=90) as http:
            reads = [pool.submit(http.get, f"/runs/{run_id}/events") for _ in range(48)]
            runs = [pool.submit(_run_as_api_md_says, http, f"burst-{uuid.uuid4()}") for _ in range(16)]
            statuses = [future.result().status_code for future in reads]
            created = [future.result() for future in runs]
        stop.set()
        seen = sampling.result()

    assert statuses == [200] * 48
    assert [answer.status_code in (200, 201) for answer in created] == [True] * 16
    assert len({answer.json()["run_id"] for answer in created}) == 16
    assert 1 <= seen.get("raydag-api", 0) <= 4
    assert 1 <= seen.get("raydag-test-api-supervisor", 0) <= 4


def test_removing_the_app_lets_a_waiting_request_finish(
    api: str, dsn: str, simulated: RunningToolServer, token_key: bytes
) -> None:
    """A replica being removed stops taking requests and finishes the ones it has before it exits: the
    client waiting on a run gets the finished run, not a dropped connection."""
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, Scaling, build_app

    name = "raydag-test-graceful-supervisor"
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=simulated.url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=shipped_toolsets(simulated.url),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=name,
    )
    serve.run(build_app(config, Scaling()), name="raydag-graceful", route_prefix="/graceful", blocking=False)
    wait_until_ok(f"{api}/graceful/readyz", within_s=90)

    simulated.server.simulate(latency_ms=1000)  # C-102 is three levels deep: a run of ~3 s
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(
                httpx.post,
                f"{api}/graceful/runs?wait=60",
                json={"case_id": "C-102"},
                headers=auth(DEMO_KEY),
                timeout=120,
            )
            deadline = time.monotonic() + 30
            while not asyncio.run(_runs_owned_by(dsn, name)):
                assert time.monotonic() < deadline, "the run never started"
                time.sleep(0.05)
            serve.delete("raydag-graceful")  # returns once the replica is gone
            response = pending.result(timeout=120)
    finally:
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)

    assert response.status_code == 201
    assert response.json()["status"] == "completed"
    assert httpx.get(f"{api}/graceful/readyz", timeout=10).status_code == 404  # it really is gone


async def _runs_owned_by(dsn: str, owner: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        return int(await connection.fetchval("SELECT count(*) FROM runs WHERE owner = $1", owner))
    finally:
        await connection.close()


def test_the_tool_server_as_an_application_of_its_own_serves_the_runs_and_checks_host_and_origin(
    api: str, dsn: str, token_key: bytes
) -> None:
    """``actors.api.app.layout``, at other route prefixes: the API without the MCP server mounted, the tool server
    an application of its own at the API's prefix + ``/mcp``, behind the same proxy. Runs complete through it,
    and it refuses a foreign Host (421) and a foreign Origin (403) as the mounted one does."""
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, Scaling, build_app, build_tool_app
    from dag.tokens import TaskTokens
    from mcp_server.server import MCP_PATH

    name = "raydag-test-layout-supervisor"
    mcp_url = f"{api}/layout{MCP_PATH}"
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=mcp_url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=shipped_toolsets(mcp_url),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=name,
    )
    serve.run(build_tool_app(config, Scaling()), name="raydag-layout-mcp", route_prefix=f"/layout{MCP_PATH}")
    serve.run(build_app(config, Scaling(), tools_mounted=False), name="raydag-layout", route_prefix="/layout")
    try:
        wait_until_ok(f"{api}/layout/readyz", within_s=90)
        tool_server = RunningToolServer(mcp_url, cast(Any, None), TaskTokens(key=token_key, audience=mcp_url))
        token = tool_server.token("caseops_get_case_snapshot")
        listed = rpc(mcp_url, token, "tools/list")
        rebinding = rpc(mcp_url, token, "tools/list", headers={"Host": "attacker.example"})
        cross_site = rpc(mcp_url, token, "tools/list", headers={"Origin": "http://attacker.example"})
        run = httpx.post(
            f"{api}/layout/runs?wait=60", json={"case_id": "C-102"}, headers=auth(DEMO_KEY), timeout=90
        ).json()
    finally:
        serve.delete("raydag-layout")
        serve.delete("raydag-layout-mcp")
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)

    assert listed.status_code == 200, listed.text
    assert "caseops_get_case_snapshot" in listed.text
    assert rebinding.status_code == 421
    assert cross_site.status_code == 403
    assert (run["status"], run["result"]) == ("completed", C102_RESULT)

"""Warm C-102 latency through the HTTP API, beside the same four tool calls made one at a time.

Both arms run in one process, interleaved sample by sample, against the same PostgreSQL and the same MCP
tool server:

- ``raydag``: ``POST /runs?wait=60`` through Ray Serve; the supervisor plans, records every transition in
  PostgreSQL and runs case/policy/docs in parallel as Ray tasks, then the alias resolution.
- ``sequential``: the reference design's shape: one tool per step, a new MCP session (2025-11-25 handshake)
  per call, no persistence — a lower bound on what a ReAct loop pays for the calls alone.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from contextlib import ExitStack

import httpx

from actors.calls.call import ToolCall
from actors.calls.mcp import call_tool
from actors.launch.background_server import BackgroundServer
from actors.launch.settings import DEV_API_KEYS, Settings, shipped_toolsets
from actors.store.database import drop_database, embedded_postgres, ensure_database, with_database
from actors.supervisor import NAMESPACE
from bench._ray import local_ray
from bench._smoke import sized
from bench._stats import HEADER, row
from dag.budget import Budgets
from dag.tokens import TaskTokens
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.server import MCP_PATH, ToolServer
from tests.caseops import prepare_caseops_database
from tests.loopback import free_port, wait_until_ok

SUPERVISOR = "raydag-bench-c102"
SAMPLES = sized(int(os.environ.get("BENCH_SAMPLES", "20")), 1)
WARMUP = sized(3, 0)


async def sequential_c102(url: str, tokens: TaskTokens) -> None:
    def call(tool: str, args: dict[str, str]) -> ToolCall:
        token = tokens.mint(
            subject="bench",
            tenant_id="tenant-demo",
            task_id="bench",
            resource={"case_id": "C-102"},
            tool=tool,
            scopes={CASEOPS_TOOLS[tool].scope},
        )
        return ToolCall("bench", "n", 1, tool, args, url, token, 10.0, protocol="legacy")

    for tool in ("caseops_get_case_snapshot", "caseops_get_policy_requirements"):
        outcome = await call_tool(call(tool, {"case_id": "C-102"}), CASEOPS_TOOLS)
        assert outcome.ok, outcome.error
    docs = await call_tool(call("caseops_list_unclassified_documents", {"case_id": "C-102"}), CASEOPS_TOOLS)
    for document in docs.output["documents"]:
        args = {"case_id": "C-102", "document_id": document["document_id"]}
        outcome = await call_tool(call("caseops_resolve_document_alias", args), CASEOPS_TOOLS)
        assert outcome.ok, outcome.error


def main() -> None:
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, build_app
    from actors.supervisor import SupervisorConfig

    settings = Settings()
    with ExitStack() as stack:
        if settings.database_url is not None:
            admin = settings.database_url.get_secret_value()
        else:
            admin = with_database(
                stack.enter_context(embedded_postgres(settings.home_dir / "bench")), "postgres"
            )
        name = f"raydag_bench_{secrets.token_hex(3)}"
        asyncio.run(ensure_database(admin, name))
        stack.callback(lambda: asyncio.run(drop_database(admin, name)))
        dsn = with_database(admin, name)
        asyncio.run(prepare_caseops_database(dsn))

        key = secrets.token_bytes(32)
        http = BackgroundServer()
        mcp_url = http.url + MCP_PATH
        tokens = TaskTokens(key=key, audience=mcp_url)
        http.start(ToolServer(ToolServerConfig(dsn=dsn, tokens=tokens)).asgi_app())
        stack.callback(http.stop)

        stack.enter_context(local_ray(namespace="raydag"))
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        stack.callback(serve.shutdown)
        config = ApiConfig(
            supervisor=SupervisorConfig(
                dsn=dsn, mcp_url=mcp_url, token_key=key, limits=Budgets(), toolsets=shipped_toolsets(mcp_url)
            ),
            api_keys=dict(DEV_API_KEYS),
            supervisor_name=SUPERVISOR,
        )
        serve.run(build_app(config), name="raydag", route_prefix="/", blocking=False)
        client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=90))
        headers = {"Authorization": "Bearer dev-key-tenant-demo"}
        wait_until_ok(f"http://127.0.0.1:{port}/healthz", within_s=90)
        stack.callback(ray.kill, ray.get_actor(SUPERVISOR, namespace=NAMESPACE))  # the app's: detached

        def via_api() -> float:
            started = time.perf_counter()
            response = client.post("/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 201 or response.json()["status"] != "completed":
                raise RuntimeError(f"C-102 did not complete: {response.status_code} {response.text}")
            return elapsed

        def sequential() -> float:
            started = time.perf_counter()
            asyncio.run(sequential_c102(mcp_url, tokens))
            return (time.perf_counter() - started) * 1000

        for _ in range(WARMUP):
            via_api()
            sequential()
        api_ms: list[float] = []
        sequential_ms: list[float] = []
        for _ in range(SAMPLES):  # interleaved, so drift on the machine hits both arms alike
            api_ms.append(via_api())
            sequential_ms.append(sequential())

    import statistics

    ratio = statistics.median(api_ms) / statistics.median(sequential_ms)
    print("\n### Warm C-102 latency\n")
    print(HEADER)
    print(row("raydag: POST /runs?wait through Serve (plan, persist, parallel tool calls)", api_ms))
    print(
        row("sequential: 4 tool calls, one at a time, new MCP session each (no persistence)", sequential_ms)
    )
    print(f"\nratio raydag / sequential (medians): {ratio:.2f}")

"""``python -m bench waiting``: what runs that wait for a person cost while they wait.

One supervisor, one PostgreSQL and one caseops tool server (a process of its own) behind the HTTP API. Each
waiting run is a run of stage ``act`` over case C-103 whose plan drafts a request (a policy-approved write)
and sends it (an irreversible write, which waits for a person). The benchmark submits ``RUNS`` of them,
waits until every one waits for its approval, then measures, over ``WINDOW_S`` of idleness, the CPU time of
the supervisor and of the database's PostgreSQL backends, the supervisor's resident memory and PostgreSQL's
connections to the database, beside the same window with no run waiting (measured first, in the same run).
Last, it approves every send and times how long until all the runs have completed, and counts the sends at
caseops (each run's once).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections import defaultdict
from contextlib import ExitStack
from typing import Any

import asyncpg
import httpx
import psutil

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import DEV_API_KEYS, ApiKeyGrant, shipped_toolsets
from actors.supervisor import NAMESPACE
from bench._cpu import CpuMeter
from bench._harness import fresh_database, tool_server_process
from bench._ray import local_ray
from bench._smoke import sized
from dag.budget import Budgets
from dag.operations import APPROVE_SCOPE
from mcp_server.contracts import ALL_SCOPES

RUNS = int(os.environ.get("BENCH_WAITING_RUNS", sized(1_000, 3)))
"""How many runs wait at once (``BENCH_WAITING_RUNS``: fewer, to compare with a build that cannot park)."""
WINDOW_S = sized(20.0, 1.0)
SUBMITTERS = 8
SUPERVISOR = "raydag-bench-waiting"
REQUESTER = "dev-key-tenant-demo"
APPROVER = "bench-approver"
CASE = {"case_id": "C-103"}
SEND = "caseops_send_document_request"


def plan(index: int) -> dict[str, Any]:
    """Run ``index``'s plan: a draft with a code of its own, so each run is its own intent (the same draft in
    two runs is one operation, approved once, docs/EFFECTS.md), and the send of that draft."""
    codes = ["ACCIDENT_CERTIFICATE", f"BENCH_WAITING_{index}"]
    return {
        "nodes": [
            {
                "id": "draft",
                "tool": "caseops_draft_document_request",
                "args": {**CASE, "missing_document_codes": codes},
            },
            {
                "id": "send",
                "tool": SEND,
                "args": {**CASE, "draft_id": {"$ref": "draft", "pointer": "/draft_id"}},
            },
        ]
    }


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def classify(process: psutil.Process, title: str) -> str:
    if title.startswith("postgres"):
        return "PostgreSQL"
    if title.startswith("ray::RunSupervisor"):
        return "supervisor"
    return "other"


def supervisor_rss_mb() -> float:
    for process in psutil.process_iter(["cmdline"]):
        if " ".join(process.info["cmdline"] or []).startswith("ray::RunSupervisor"):
            return float(process.memory_info().rss) / 2**20
    raise RuntimeError("no supervisor process")


async def database_facts(dsn: str) -> dict[str, int]:
    """The connections to the benchmark's database, and how many of its runs wait and are parked."""
    connection = await asyncpg.connect(dsn)
    try:
        row = await connection.fetchrow(
            """SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()) AS connections,
                      (SELECT count(*) FROM runs WHERE status = 'waiting') AS waiting,
                      (SELECT count(*) FROM runs WHERE to_jsonb(runs) ->> 'parked_until' IS NOT NULL) AS parked,
                      (SELECT count(*) FROM runs WHERE finished_at IS NOT NULL) AS finished"""
        )
        return dict(row)
    finally:
        await connection.close()


async def sent(dsn: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval("SELECT count(*) FROM document_request_outbox")
        return count
    finally:
        await connection.close()


async def submit_all(base: str, count: int) -> list[str]:
    """``count`` runs posted by ``SUBMITTERS`` clients at once: their ids."""
    queue = list(range(count))
    created: list[str] = []

    async def submitter(client: httpx.AsyncClient) -> None:
        while queue:
            body = {"resource": CASE, "stage": "act", "plan": plan(queue.pop())}
            while True:
                answer = await client.post("/runs", json=body, headers=auth(REQUESTER))
                if answer.status_code == 201:
                    created.append(answer.json()["run_id"])
                    break
                if answer.status_code != 503:
                    raise RuntimeError(f"{answer.status_code} {answer.text}")
                await asyncio.sleep(float(answer.headers.get("retry-after", "1")))

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        await asyncio.gather(*(submitter(client) for _ in range(SUBMITTERS)))
    return created


async def approve_all(base: str, run_ids: list[str]) -> None:
    async def approve(client: httpx.AsyncClient, run_id: str) -> None:
        operations = (await client.get(f"/runs/{run_id}/operations", headers=auth(APPROVER))).json()
        send = next(op for op in operations if op["tool"] == SEND)
        url = f"/runs/{run_id}/operations/{send['operation_id']}/approve"
        answer = await client.post(url, json={"args_hash": send["args_hash"]}, headers=auth(APPROVER))
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code} {answer.text}")

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for start in range(0, len(run_ids), SUBMITTERS):
            await asyncio.gather(*(approve(client, run_id) for run_id in run_ids[start : start + SUBMITTERS]))


def until(dsn: str, done: Any, what: str, within_s: float = 900.0) -> dict[str, int]:
    deadline = time.monotonic() + within_s
    while True:
        facts = asyncio.run(database_facts(dsn))
        if done(facts):
            return facts
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: {facts}")
        time.sleep(0.5)


def idle(meter: CpuMeter) -> dict[str, float]:
    """CPU seconds by role over ``WINDOW_S`` of nothing but waiting."""
    with meter.measure() as used:
        time.sleep(WINDOW_S)
    return defaultdict(float, used)


def main() -> None:
    import ray

    from actors.api.app import ApiConfig, create_app
    from actors.supervisor import SupervisorConfig

    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        key = secrets.token_bytes(32)
        mcp_url, _ = stack.enter_context(tool_server_process(dsn, key))
        stack.enter_context(local_ray(namespace="raydag"))
        config = ApiConfig(
            supervisor=SupervisorConfig(
                dsn=dsn, mcp_url=mcp_url, token_key=key, limits=Budgets(), toolsets=shipped_toolsets(mcp_url)
            ),
            api_keys={
                **DEV_API_KEYS,
                APPROVER: ApiKeyGrant(
                    tenant_id="tenant-demo", subject="approver", scopes=(*ALL_SCOPES, APPROVE_SCOPE)
                ),
            },
            supervisor_name=SUPERVISOR,
        )
        http = BackgroundServer().start(create_app(config), timeout_s=90)
        stack.callback(http.stop)
        stack.callback(lambda: ray.kill(ray.get_actor(SUPERVISOR, namespace=NAMESPACE)))
        with httpx.Client(base_url=http.url, timeout=90) as client:
            deadline = time.monotonic() + 90
            while client.get("/readyz").status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("the API did not become ready")
                time.sleep(0.2)
        meter = CpuMeter(dsn.rsplit("/", 1)[-1].split("?")[0], 0, classify)

        quiet_cpu, quiet_rss = idle(meter), supervisor_rss_mb()
        quiet_db = asyncio.run(database_facts(dsn))

        started = time.perf_counter()
        run_ids = asyncio.run(submit_all(http.url, RUNS))
        until(dsn, lambda facts: facts["waiting"] >= RUNS, "the runs never all waited")
        all_waiting_s = time.perf_counter() - started
        time.sleep(2.0)  # a run that waits parks once its other branches are done
        waiting_cpu, waiting_rss = idle(meter), supervisor_rss_mb()
        waiting_db = asyncio.run(database_facts(dsn))

        approved_at = time.perf_counter()
        asyncio.run(approve_all(http.url, run_ids))
        until(dsn, lambda facts: facts["finished"] >= RUNS, "the approved runs never all finished")
        all_done_s = time.perf_counter() - approved_at
        sends = asyncio.run(sent(dsn))

    print(f"\n### Runs waiting for a person: {RUNS} at once, {WINDOW_S:g} s windows\n")
    print(
        "| state | supervisor CPU ms/s | PostgreSQL CPU ms/s | supervisor RSS MB | connections | waiting | parked |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, cpu, rss, facts in (
        ("no run waiting", quiet_cpu, quiet_rss, quiet_db),
        (f"{RUNS} runs waiting", waiting_cpu, waiting_rss, waiting_db),
    ):
        print(
            f"| {label} | {cpu['supervisor'] * 1000 / WINDOW_S:.1f} | {cpu['PostgreSQL'] * 1000 / WINDOW_S:.1f} "
            f"| {rss:.0f} | {facts['connections']} | {facts['waiting']} | {facts['parked']} |"
        )
    print(
        f"\nSubmitted until all waited: {all_waiting_s:.1f} s; every send approved until every run completed: "
        f"{all_done_s:.1f} s; sends counted at caseops: {sends} of {RUNS}."
    )

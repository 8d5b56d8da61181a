"""``python -m bench effects``: what a write costs beside a read, through the HTTP API, in one run.

Three arms, interleaved sample by sample against one supervisor, one PostgreSQL and one caseops tool server (a
process of its own), each a one- or two-node plan of a run of stage ``act`` over case C-103:

- ``read``: ``caseops_find_document_request``, a read of the same server, the floor;
- ``write, policy-approved``: ``caseops_draft_document_request``: an operation proposed, validated, approved
  by the policy, claimed and executed, its row moved five times;
- ``write, person-approved``: a draft, then ``caseops_send_document_request``, which waits for a person: the
  benchmark approves it the moment the run says it waits, and times the approval's answer to the run's end.

Besides milliseconds it counts what each run appended: its events (``run_events``) and its operations' moves
(``operation_transitions``), read from PostgreSQL afterwards.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from contextlib import ExitStack
from typing import Any

import asyncpg
import httpx

from actors.launch.background_server import BackgroundServer
from actors.launch.settings import DEV_API_KEYS, ApiKeyGrant, shipped_toolsets
from actors.supervisor import NAMESPACE
from bench._harness import fresh_database, tool_server_process
from bench._ray import local_ray
from bench._smoke import sized
from bench._stats import HEADER, row
from dag.budget import Budgets
from dag.operations import APPROVE_SCOPE
from mcp_server.contracts import ALL_SCOPES

SAMPLES = sized(15, 1)
WARMUP = sized(2, 0)
SUPERVISOR = "raydag-bench-effects"
REQUESTER = "dev-key-tenant-demo"
APPROVER = "bench-approver"
CASE = {"case_id": "C-103"}
DRAFT_TOOL = "caseops_draft_document_request"
SEND = {
    "id": "send",
    "tool": "caseops_send_document_request",
    "args": {**CASE, "draft_id": {"$ref": "draft", "pointer": "/draft_id"}},
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class Arms:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.samples = 0

    def _wait(self, run_id: str, done: Any) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            run: dict[str, Any] = self.client.get(f"/runs/{run_id}", headers=auth(REQUESTER)).json()
            if done(run):
                return run
            time.sleep(0.002)
        raise RuntimeError(f"run {run_id} did not get there")

    def _post(self, nodes: list[dict[str, Any]], wait: bool) -> dict[str, Any]:
        body = {"resource": CASE, "stage": "act", "plan": {"nodes": nodes}}
        answer = self.client.post(
            "/runs", params={"wait": 60} if wait else {}, json=body, headers=auth(REQUESTER)
        )
        if answer.status_code != 201:
            raise RuntimeError(f"{answer.status_code} {answer.text}")
        run: dict[str, Any] = answer.json()
        return run

    def read(self) -> tuple[float, str]:
        self.samples += 1
        find = {
            "id": "find",
            "tool": "caseops_find_document_request",
            "args": {**CASE, "idempotency_key": f"k-{self.samples}"},
        }
        started = time.perf_counter()
        run = self._post([find], wait=True)
        elapsed = (time.perf_counter() - started) * 1000
        if run["status"] != "completed":
            raise RuntimeError(f"the read did not complete: {run}")
        return elapsed, run["run_id"]

    def _draft(self) -> dict[str, Any]:
        """A draft no earlier sample asked for: the same one would be the same intent, its outcome read from
        the ledger without a call (docs/EFFECTS.md), and the arm would time a read."""
        self.samples += 1
        codes = ["ACCIDENT_CERTIFICATE", f"BENCH_SAMPLE_{self.samples}"]
        return {"id": "draft", "tool": DRAFT_TOOL, "args": {**CASE, "missing_document_codes": codes}}

    def policy_write(self) -> tuple[float, str]:
        draft = self._draft()
        started = time.perf_counter()
        run = self._post([draft], wait=True)
        elapsed = (time.perf_counter() - started) * 1000
        if run["status"] != "completed":
            raise RuntimeError(f"the draft did not complete: {run}")
        return elapsed, run["run_id"]

    def person_write(self, *, inbox: bool = False) -> tuple[float, float, str]:
        """Submit to completion, and the approval's answer to completion (ms each), of a draft and a send.
        ``inbox``: the approver finds the send in ``GET /decisions`` and posts to the route its item names (as
        the viewer and ``raydag inbox`` do), instead of listing the run's operations."""
        draft = self._draft()
        started = time.perf_counter()
        run_id = self._post([draft, SEND], wait=False)["run_id"]
        self._wait(run_id, lambda run: run["status"] == "waiting")
        if inbox:
            items = self.client.get("/decisions", params={"run_id": run_id}, headers=auth(APPROVER)).json()
            send = next(item for item in items["items"] if item.get("tool") == SEND["tool"])
            url = send["decide"]["approve"]
        else:
            operations = self.client.get(f"/runs/{run_id}/operations", headers=auth(APPROVER)).json()
            send = next(operation for operation in operations if operation["tool"] == SEND["tool"])
            url = f"/runs/{run_id}/operations/{send['operation_id']}/approve"
        answer = self.client.post(url, json={"args_hash": send["args_hash"]}, headers=auth(APPROVER))
        approved = time.perf_counter()
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code} {answer.text}")
        run = self._wait(run_id, lambda run: run["finished_at"] is not None)
        ended = time.perf_counter()
        if run["status"] != "completed":
            raise RuntimeError(f"the send did not complete: {run}")
        return (ended - started) * 1000, (ended - approved) * 1000, run_id


async def appends(dsn: str, run_ids: list[str]) -> tuple[float, float]:
    """Median events and operation moves per run."""
    connection = await asyncpg.connect(dsn)
    try:
        events, moves = [], []
        for run_id in run_ids:
            events.append(
                await connection.fetchval("SELECT count(*) FROM run_events WHERE run_id = $1", run_id)
            )
            moves.append(
                await connection.fetchval(
                    """SELECT count(*) FROM operation_transitions t JOIN operations o USING (operation_id)
                       WHERE o.run_id = $1""",
                    run_id,
                )
            )
    finally:
        await connection.close()
    return statistics.median(events), statistics.median(moves)


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
        client = stack.enter_context(httpx.Client(base_url=http.url, timeout=90))
        deadline = time.monotonic() + 90
        while client.get("/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the API did not become ready")
            time.sleep(0.2)
        arms = Arms(client)
        for _ in range(WARMUP):
            arms.read()
            arms.policy_write()
            arms.person_write()
        read_ms, policy_ms, person_ms, decided_ms, inbox_ms, inbox_decided_ms = [], [], [], [], [], []
        runs: dict[str, list[str]] = {"read": [], "policy": [], "person": []}
        for _ in range(SAMPLES):  # interleaved, so drift on the machine hits every arm alike
            elapsed, run_id = arms.read()
            read_ms.append(elapsed)
            runs["read"].append(run_id)
            elapsed, run_id = arms.policy_write()
            policy_ms.append(elapsed)
            runs["policy"].append(run_id)
            elapsed, after_approval, run_id = arms.person_write()
            person_ms.append(elapsed)
            decided_ms.append(after_approval)
            runs["person"].append(run_id)
            elapsed, after_approval, run_id = arms.person_write(inbox=True)
            inbox_ms.append(elapsed)
            inbox_decided_ms.append(after_approval)
        counted = {arm: asyncio.run(appends(dsn, ids)) for arm, ids in runs.items()}

    print("\n### A write beside a read (one node each; the person-approved arm is a draft and a send)\n")
    print(HEADER)
    print(row("read: caseops_find_document_request (POST /runs?wait)", read_ms))
    print(row("write, policy-approved: caseops_draft_document_request (POST /runs?wait)", policy_ms))
    print(row("write, person-approved: draft + send, submit → end (approved at once)", person_ms))
    print(row("write, person-approved: the approval's answer → the run's end", decided_ms))
    print(row("write, person-approved through the inbox: submit → end", inbox_ms))
    print(
        row(
            "write, person-approved through the inbox: the approval's answer → the run's end",
            inbox_decided_ms,
        )
    )
    ratio = statistics.median(policy_ms) / statistics.median(read_ms)
    print(f"\nratio policy-approved write / read (medians): {ratio:.2f}")
    print("\n### Appends per run, by arm (medians)\n")
    print("| arm | events per run | operation moves per run |\n|---|---|---|")
    for arm, (events, moves) in counted.items():
        print(f"| {arm} | {events:g} | {moves:g} |")

"""100 faults in a row against writes, chosen at random (seeded, and printed), each on a run of its own: zero
duplicated and zero lost effects, and every operation ends ``succeeded``, ``failed``, ``rejected``, ``expired``
or ``unknown`` and named.

Each fault is a run of stage ``act`` over a copy of C-103 of its own (a send is one intent per case across runs)
that waits for a person to approve sending its request, then one of: an approval; two approvals at once; a
rejection; an approval quoting a stale hash, then the right one; a send that commits and never answers (its
caller times out: ``unknown``, reconciled); a cancellation right after the approval, with the send possibly out;
the supervisor killed at a random moment after the approval. The effect is counted in caseops' outbox, under
the operation's id: never in raydag's own ledger.

``RAYDAG_FAULT_SEED`` replays a sequence; ``RAYDAG_FAULTS`` sets how many (100).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import asyncpg
import httpx
import pytest

from actors.supervisor import NAMESPACE
from actors.toolsets.config import parse_toolsets
from tests.caseops import copy_case
from tests.conftest import REPO
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, RunningToolServer, auth
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture

SEND = "caseops_send_document_request"
KINDS = ("approve", "double-approve", "reject", "stale-then-approve", "stall", "cancel-after-approve", "kill")
WEIGHTS = (20, 15, 15, 15, 15, 15, 5)
SETTLED = {"succeeded", "failed", "rejected", "expired"}
SEND_TIMEOUT_S = 1.5
"""The send's timeout in this test's toolsets: a send that never answers costs this, not the shipped 10 s."""


def toolsets_with_a_short_send(mcp_url: str, *, reconcile: bool = True) -> Any:
    """The shipped caseops toolsets, but for the send's timeout (and, ``reconcile=False``, no read to
    reconcile it with)."""
    text = (REPO / "mcp_server" / "caseops.yaml").read_text(encoding="utf-8")
    if not reconcile:
        start = text.index("          reconcile:\n")
        end = text.index("      caseops_find_document_request:")
        text = text[:start] + text[end:]
    marker = "      caseops_send_document_request:\n"
    assert marker in text
    text = text.replace(marker, f"{marker}        timeout_s: {SEND_TIMEOUT_S}\n", 1)
    parsed = parse_toolsets(text, "caseops-short-send.yaml", {"RAYDAG_MCP_URL": mcp_url})
    assert parsed.servers[0].tools[SEND].timeout_s == SEND_TIMEOUT_S
    return parsed


async def connect_when_a_slot_is_free(dsn: str, within_s: float = 60.0) -> asyncpg.Connection:
    """A connection for counting effects, once PostgreSQL has a slot for it: the suite's two processes share
    the machine's server (``max_connections`` 100), and a count taken while the other process's supervisors
    hold most of them waits for one, as raydag's own connections do (``actors.store.resilience``)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await asyncpg.connect(dsn)
        except asyncpg.TooManyConnectionsError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


class Faults:
    def __init__(self, base: str, dsn: str, ledger: str, tools: RunningToolServer, supervisor: Any) -> None:
        self.base = base
        self.client = httpx.Client(base_url=base, timeout=30)
        self.dsn = dsn
        self.ledger = ledger
        """The supervisor's database, which checks that a run's case is its tenant's."""
        self.tools = tools
        self.supervisor = supervisor

    def request(self, method: str, path: str, key: str = DEMO_KEY, **kwargs: Any) -> httpx.Response:
        """The API's answer, waiting out a supervisor that is restarting (503 with Retry-After)."""
        deadline = time.monotonic() + 60
        while True:
            answer = self.client.request(method, path, headers=auth(key), **kwargs)
            if answer.status_code != 503 or time.monotonic() > deadline:
                return answer
            time.sleep(float(answer.headers.get("retry-after", "1")))

    def run(self, run_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.request("GET", f"/runs/{run_id}").json()
        return answer

    def until(self, run_id: str, done: Any, within_s: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + within_s
        while not done(run := self.run(run_id)):
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
        return run

    def send_of(self, run_id: str) -> dict[str, Any]:
        listed = self.request("GET", f"/runs/{run_id}/operations").json()
        return next(operation for operation in listed if operation["tool"] == SEND)

    def decide(
        self, run_id: str, send: dict[str, Any], verb: str, quoted: str | None = None
    ) -> httpx.Response:
        path = f"/runs/{run_id}/operations/{send['operation_id']}/{verb}"
        return self.request("POST", path, APPROVER_KEY, json={"args_hash": quoted or send["args_hash"]})

    def effects(self, send: dict[str, Any]) -> int:
        async def count() -> int:
            connection = await connect_when_a_slot_is_free(self.dsn)
            try:
                rows: int = await connection.fetchval(
                    "SELECT count(*) FROM document_request_outbox WHERE idempotency_key = $1",
                    send["operation_id"],
                )
                return rows
            finally:
                await connection.close()

        return asyncio.run(count())

    def one(self, kind: str, rng: random.Random) -> tuple[str, str]:
        """Apply one fault to a fresh run; its send's final state, and what the run ended as."""
        import ray

        # A case of its own: a request for one case's certificate is one intent across runs (docs/EFFECTS.md).
        case = asyncio.run(copy_case(self.dsn, self.ledger))
        created = self.request("POST", "/runs", json={"case_id": case, "stage": "act"})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        self.until(run_id, lambda run: run["status"] == "waiting")
        send = self.send_of(run_id)
        match kind:
            case "approve":
                assert self.decide(run_id, send, "approve").status_code == 200
            case "double-approve":
                with ThreadPoolExecutor(2) as pool:
                    codes = sorted(
                        pool.map(lambda _: self.decide(run_id, send, "approve").status_code, range(2))
                    )
                assert codes == [200, 409], codes
            case "reject":
                assert self.decide(run_id, send, "reject").status_code == 200
            case "stale-then-approve":
                assert self.decide(run_id, send, "approve", quoted="f" * 64).status_code == 409
                assert self.decide(run_id, send, "approve").status_code == 200
            case "stall":
                self.tools.server.simulate(stall_after_commit={SEND: 1})
                assert self.decide(run_id, send, "approve").status_code == 200
            case "cancel-after-approve":
                assert self.decide(run_id, send, "approve").status_code == 200
                time.sleep(rng.uniform(0, 0.3))
                self.request("POST", f"/runs/{run_id}/cancel")
            case "kill":
                assert self.decide(run_id, send, "approve").status_code == 200
                time.sleep(rng.uniform(0, 0.3))
                ray.kill(self.supervisor, no_restart=False)
            case _:
                raise AssertionError(kind)
        run = self.until(run_id, lambda run: run["finished_at"] is not None)
        self.tools.server.simulate()
        deadline = time.monotonic() + 60  # a send out when its run was cancelled is settled by the sweep
        while (state := self.send_of(run_id)["state"]) not in SETTLED and time.monotonic() < deadline:
            time.sleep(0.25)
        effects = self.effects(send)
        assert effects == (1 if state == "succeeded" else 0), (kind, state, effects, run)
        return state, run["status"]


@pytest.mark.timeout(1500)
def test_a_hundred_faults_in_a_row_duplicate_no_effect_and_lose_none(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    import ray

    seed = int(os.environ.get("RAYDAG_FAULT_SEED", str(random.SystemRandom().randrange(2**32))))
    count = int(os.environ.get("RAYDAG_FAULTS", "100"))
    print(f"fault seed {seed} ({count} faults): RAYDAG_FAULT_SEED={seed} replays them")
    rng = random.Random(seed)
    tools: RunningToolServer = start_tool_server()
    config = api_config(scratch_dsn, tools.url, token_key, toolsets=toolsets_with_a_short_send(tools.url))
    faults = Faults(
        serve_api(config), dsn, scratch_dsn, tools, ray.get_actor(config.supervisor_name, namespace=NAMESPACE)
    )

    endings: Counter[tuple[str, str, str]] = Counter()
    with faults.client:
        for index in range(count):
            kind = rng.choices(KINDS, WEIGHTS)[0]
            try:
                state, status = faults.one(kind, rng)
            except AssertionError as failed:
                raise AssertionError(f"fault {index} ({kind}) of seed {seed}: {failed}") from None
            endings[kind, state, status] += 1
    print(sorted(endings.items()))

    by_kind: dict[str, set[str]] = {}
    for (kind, state, _), _n in endings.items():
        by_kind.setdefault(kind, set()).add(state)
    for kind in (
        "approve",
        "double-approve",
        "stale-then-approve",
        "stall",
    ):  # the send was made, or committed
        assert by_kind.get(kind, {"succeeded"}) == {"succeeded"}, (kind, by_kind, seed)
    # A supervisor killed between the claim and the call: the send never left, and the read that reconciles
    # it says so once the call can no longer land (``failed``, no effect); killed after, it happened once.
    assert by_kind.get("kill", set()) <= {"succeeded", "failed"}, (by_kind, seed)
    assert by_kind.get("reject", {"rejected"}) == {"rejected"}, (by_kind, seed)
    assert by_kind.get("cancel-after-approve", set()) <= SETTLED, (by_kind, seed)

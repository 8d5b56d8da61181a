"""Bytes stored per node: what a run's checkpoints cost in PostgreSQL beyond its tool outputs.

Method: runs of 10, 100 and 1,000 nodes (a wide DAG, each node a distinct action with a 200-byte output)
are driven by the real RunDriver and written by the real RunStore into a fresh database; tools run
in-process (storage does not depend on how a call executes). For each run we sum ``pg_column_size`` of
every row it wrote — its summary row, its events, its ledger rows, its audit and outbox rows — and
subtract the bytes of the tool outputs themselves (their canonical JSON). Goal: constant per node, under
2 KB beyond the outputs.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict

from actors.calls.call import ToolCall, ToolOutcome
from actors.run.deps import RunDeps, ToolEndpoint
from actors.run.driver import RunDriver
from actors.run.recorder import now
from actors.store.database import create_pool, drop_database, ensure_database, with_database
from actors.store.runs import RunStore
from actors.store.setup import prepare_database
from bench._smoke import sized
from dag.budget import Budgets
from dag.contracts import Risk, ToolContract, catalogue_of
from dag.events import RunCreated
from dag.fingerprint import canonical_json
from dag.run_state import apply
from dag.tokens import TaskTokens
from planner.base import Final, JoinDecision, PlanningContext

SIZES = sized((10, 100, 1_000), (10,))
OUTPUT = "x" * 160  # with its keys, each output is ~200 bytes of canonical JSON


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")
    case_id: str
    n: int


class _Output(BaseModel):
    n: int
    text: str


PROBE = ToolContract(
    name="bench_probe",
    version="1",
    description="A synthetic read",
    scope="bench:read",
    risk=Risk.READ_ONLY,
    input_model=_Input,
    run_bound=frozenset({"case_id"}),
    output_model=_Output,
)


class _InProcess:
    async def run(self, call: ToolCall) -> ToolOutcome:
        started = now()
        return ToolOutcome(
            output={"n": call.args["n"], "text": OUTPUT}, error=None, started_at=started, finished_at=now()
        )


class _Planner:
    name = "bench"

    def __init__(self, nodes: int) -> None:
        self._nodes = nodes

    async def propose(self, context: PlanningContext) -> dict[str, Any]:
        return {
            "nodes": [
                {"id": f"n{i}", "tool": PROBE.name, "args": {"case_id": context.resource["case_id"], "n": i}}
                for i in range(self._nodes)
            ]
        }

    async def decide(self, context: PlanningContext, observations: Any) -> JoinDecision:
        return Final(result={"nodes": len(observations)}, citations=[])


_WRITTEN = """
SELECT
  (SELECT pg_column_size(r.*) FROM runs r WHERE run_id = $1)
  + (SELECT coalesce(sum(pg_column_size(e.*)), 0) FROM run_events e WHERE run_id = $1)
  + (SELECT coalesce(sum(pg_column_size(l.*)), 0) FROM tool_ledger l WHERE run_id = $1)
  + (SELECT coalesce(sum(pg_column_size(a.*)), 0) FROM audit_events a WHERE run_id = $1)
  + (SELECT coalesce(sum(pg_column_size(o.*)), 0) FROM outbox o WHERE run_id = $1)
"""


async def _measure(dsn: str, nodes: int) -> tuple[int, int]:
    pool = await create_pool(dsn, max_size=2)
    try:
        store = RunStore(pool, owner="bench")
        created = RunCreated(
            at=now(),
            run_id=str(uuid.uuid4()),
            tenant_id="tenant-demo",
            subject="bench",
            scopes=("bench:read",),
            resource={"case_id": "C-101"},
            goal="storage",
            planner="bench",
            budgets=Budgets(max_nodes=nodes, max_parallel=64, deadline_s=600),
        )
        await store.create_run(created, idempotency_key=None, request_hash="bench")
        deps = RunDeps(
            executor=_InProcess(),
            catalogue=catalogue_of(PROBE),
            planners={"bench": _Planner(nodes)},
            endpoint=ToolEndpoint(
                url="http://bench/mcp",
                tokens=TaskTokens(key=secrets.token_bytes(32), audience="http://bench/mcp"),
            ),
        )
        driver = RunDriver(deps, sink=store)
        state = await driver.drive(apply(None, created), last_seq=1)
        assert state.status.value == "completed", state.detail
        written = int(await pool.fetchval(_WRITTEN, uuid.UUID(created.run_id)))
        outputs = sum(
            len(canonical_json(node.output).encode()) for node in state.nodes.values() if node.output
        )
        return written, outputs
    finally:
        await pool.close()


async def _run(admin: str) -> list[tuple[int, int, int]]:
    name = f"raydag_bench_{secrets.token_hex(3)}"
    await ensure_database(admin, name)
    dsn = with_database(admin, name)
    try:
        await prepare_database(dsn)
        rows = []
        for nodes in SIZES:
            written, outputs = await _measure(dsn, nodes)
            rows.append((nodes, written, outputs))
        return rows
    finally:
        await drop_database(admin, name)


def main() -> None:
    admin = os.environ.get("RAYDAG_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    rows = asyncio.run(_run(admin))
    print("\n### Bytes stored per node\n")
    print("| nodes | bytes written | of which tool outputs | beyond outputs per node |")
    print("|---|---|---|---|")
    for nodes, written, outputs in rows:
        print(f"| {nodes} | {written:,} | {outputs:,} | {(written - outputs) / nodes:,.0f} |")


if __name__ == "__main__":
    main()

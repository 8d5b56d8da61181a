"""The public shapes of a run, its nodes and its events: one definition for the HTTP API and the CLI."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from actors.store.database import create_pool
from actors.store.runs import RunStore, StoredEvent
from dag.contracts import Recording, ToolCatalogue
from dag.events import event_to_json
from dag.fingerprint import sha256_hex
from dag.policy import Principal
from dag.run_state import NodeState, RunState, fold


def iso(moment: datetime | None) -> str | None:
    """``moment`` as ISO 8601, or ``None``."""
    return moment.isoformat() if moment is not None else None


def run_view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": str(row["run_id"]),
        "resource": row["resource"],
        # The caseops shorthand, for clients written before runs named a resource.
        **({"case_id": row["case_id"]} if row["case_id"] is not None else {}),
        "goal": row["goal"],
        "planner": row["planner"],
        "status": row["status"],
        "stop_reason": row["stop_reason"],
        "detail": row["detail"],
        "result": row["result"],
        "plan": row["plan"],
        "created_at": iso(row["created_at"]),
        "finished_at": iso(row["finished_at"]),
        # The chain of continuations, both ways: the run this one continues, and the one continuing it.
        "continues": _id_or_none(row.get("continues")),
        "continued_by": _id_or_none(row.get("continued_by")),
    }


def _id_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def attempt_view(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "attempt": row["attempt"],
        "status": row["status"],
        "error": row["error"],
        "dispatched_at": iso(row["dispatched_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
    }


def node_view(
    node: NodeState, catalogue: ToolCatalogue, history: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    contract = catalogue.get(node.tool)
    args: Any = dict(node.args) if node.args is not None else None
    if args is not None and contract is not None and contract.recording is Recording.DIGEST:
        args = {"sha256": sha256_hex(args)}
    return {
        "node_id": node.node_id,
        "round": node.round,
        "tool": node.tool,
        "args": args,
        "fingerprint": node.fingerprint,
        "status": node.status.value,
        "attempts": node.attempts,
        "dispatched_at": iso(node.dispatched_at),
        "started_at": iso(node.started_at),
        "finished_at": iso(node.finished_at),
        "error": node.error.model_dump(mode="json") if node.error is not None else None,
        "decision": node.decision.model_dump(mode="json") if node.decision is not None else None,
        "reused_from": node.reused_from,
        "reused_from_run": node.reused_from_run,
        "for_each_parent": node.parent,
        "children": list(node.children) if node.children is not None else None,
        "history": [attempt_view(row) for row in history or []],
    }


def nodes_view(
    state: RunState, catalogue: ToolCatalogue, ledger: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Each node in run order, with its ledger rows (one per attempt) as ``history``."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(ledger or [], key=lambda row: (row["node_id"], row["attempt"])):
        by_node.setdefault(row["node_id"], []).append(row)
    return [node_view(state.nodes[node_id], catalogue, by_node.get(node_id)) for node_id in state.order]


def event_view(stored: StoredEvent) -> dict[str, Any]:
    return {"seq": stored.seq, "recorded_at": iso(stored.recorded_at), **event_to_json(stored.event)}


async def load_state(store: RunStore, run_id: str) -> RunState:
    return fold(stored.event for stored in await store.events(run_id))


async def read_report(
    dsn: str, principal: Principal, run_id: str, catalogue: ToolCatalogue
) -> dict[str, Any]:
    """The run and its nodes as the API shows them, read over a connection of its own (the CLI's and the
    Python API's report); ``catalogue`` is the supervisor's."""
    pool = await create_pool(dsn, max_size=1)
    try:
        store = RunStore(pool)
        row = await store.run_row(principal, run_id)
        assert row is not None
        state = await load_state(store, run_id)
        return {"run": run_view(row), "nodes": nodes_view(state, catalogue, await store.ledger(run_id))}
    finally:
        await pool.close()

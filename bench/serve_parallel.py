"""Parallel efficiency through Serve: a 12-way fan-out case posted to the API, timed from the API's own nodes.

The case is C-104's document check cut to width 12, as a client plan: the case snapshot, the policy and the
document listing at once, then twelve alias resolutions, each of one listed document (a ``$ref`` into the
listing), so all twelve wait for it. Every tool answers after ``BENCH_SERVE_LATENCY_MS`` (100 ms): the critical
path is two calls, 200 ms.

Each layout (``bench.load``'s ``serve``, the tool server mounted in the API app; ``app``, the tool server a
Serve application of its own; ``process``, a tool server past the proxy, as ``raydag serve`` ships) runs in
the same Serve, redeployed with a supervisor of its own, one after the other, round by round
(``BENCH_SERVE_ROUNDS``); each posts ``POST /runs?wait=60`` one run at a time. The makespan is read from
``GET /runs/{id}/nodes``: the first node's ``dispatched_at`` to the last node's ``finished_at``. Efficiency =
makespan ÷ critical path (1.00 is ideal). The first run after each deployment is a warm-up, not counted.
"""

from __future__ import annotations

import os
import secrets
import statistics
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import httpx

from actors.calls.call import ExecutorKind
from bench._harness import tool_server_process
from bench._load import HEADERS, percentile
from bench._smoke import sized
from bench.load import MCP_PLACES, deploy, serve_runtime
from mcp_server.planner import CASE_TOOL, DOCUMENTS_TOOL, POLICY_TOOL, RESOLVE_TOOL
from mcp_server.server import MCP_PATH

WIDTH = 12
LATENCY_MS = int(os.environ.get("BENCH_SERVE_LATENCY_MS", "100"))
CRITICAL_PATH_MS = 2 * LATENCY_MS
RUNS = sized(int(os.environ.get("BENCH_SERVE_RUNS", "7")), 1)
"""Counted runs per layout per round."""
ROUNDS = sized(int(os.environ.get("BENCH_SERVE_ROUNDS", "3")), 1)
LAYOUTS = sized(("serve", "app", "process"), ("app", "process"))
GOAL = 1.10


def fan_out_plan(width: int = WIDTH) -> dict[str, Any]:
    """Three independent reads of C-104, then ``width`` resolutions that each wait for the listing."""
    case = {"case_id": "C-104"}
    resolves = [
        {
            "id": f"resolve{index}",
            "tool": RESOLVE_TOOL,
            "args": {
                **case,
                "document_id": {"$ref": "docs", "pointer": f"/documents/{index}/document_id"},
            },
        }
        for index in range(width)
    ]
    return {
        "nodes": [
            {"id": "case", "tool": CASE_TOOL, "args": case},
            {"id": "policy", "tool": POLICY_TOOL, "args": case},
            {"id": "docs", "tool": DOCUMENTS_TOOL, "args": case},
            *resolves,
        ]
    }


def makespan_ms(nodes: list[dict[str, Any]]) -> float:
    """First dispatch to last finish, from the API's node view."""
    dispatched = [datetime.fromisoformat(node["dispatched_at"]) for node in nodes]
    finished = [datetime.fromisoformat(node["finished_at"]) for node in nodes]
    return (max(finished) - min(dispatched)).total_seconds() * 1000


def _one(http: httpx.Client) -> float:
    body = {"case_id": "C-104", "plan": fan_out_plan()}
    response = http.post("/runs", params={"wait": 60}, json=body, headers=HEADERS)
    response.raise_for_status()
    run = response.json()
    nodes = http.get(f"/runs/{run['run_id']}/nodes", headers=HEADERS)
    nodes.raise_for_status()
    done = [node for node in nodes.json() if node["status"] == "succeeded"]
    if len(done) != WIDTH + 3:
        raise RuntimeError(
            f"run {run['run_id']} ({run['status']}): {len(done)} of {WIDTH + 3} nodes succeeded"
        )
    return makespan_ms(done) / CRITICAL_PATH_MS


def _measure() -> dict[str, list[float]]:
    import ray

    ratios: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
    with serve_runtime() as (dsn, base_url), ExitStack() as stack:
        key = secrets.token_bytes(32)
        beside = base_url + MCP_PATH
        if "process" in LAYOUTS:
            beside, _ = stack.enter_context(tool_server_process(dsn, key, latency_ms=LATENCY_MS))
        for round_ in range(ROUNDS):
            for layout in LAYOUTS if round_ % 2 == 0 else tuple(reversed(LAYOUTS)):
                name = f"raydag-fanout-{layout}-{round_}"
                supervisor = deploy(
                    dsn,
                    base_url,
                    beside if layout == "process" else base_url + MCP_PATH,
                    key,
                    name,
                    ExecutorKind.CALLERS,
                    own_app=layout == "app",
                    tool_latency_ms=LATENCY_MS,
                )
                with httpx.Client(base_url=base_url, timeout=90) as http:
                    _one(http)  # the first run on a new supervisor: the cold-start benchmark's subject
                    ratios[layout].extend(_one(http) for _ in range(RUNS))
                ray.kill(supervisor)
    return ratios


def main() -> None:
    ratios = _measure()
    print(
        f"\n### Parallel efficiency through Serve ({WIDTH}-way fan-out of C-104, {LATENCY_MS} ms tools, "
        f"critical path {CRITICAL_PATH_MS} ms; {ROUNDS} rounds × {RUNS} warm runs per layout)\n"
    )
    print("| tool server | runs | median | p90 | min | max |")
    print("|---|---|---|---|---|---|")
    for layout, values in ratios.items():
        print(
            f"| {MCP_PLACES[layout]} | {len(values)} | {statistics.median(values):.2f} "
            f"| {percentile(values, 0.9):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    print(f"\nGoal: ≤ {GOAL:.2f} (makespan from the API's node timestamps ÷ critical path).")

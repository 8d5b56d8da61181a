"""A raydag deployment over a three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and
two workers, each a raylet of its own on loopback ports of its own), driven by ``import raydag`` with two
supervisors. Run as a program by ``test_multinode.py``, in a process of its own (one Ray per process); it prints
what it found as one JSON object, and the test decides.

What it does: where the supervisors and their callers were placed; runs over the shipped caseops server and a
stdio server that only one worker may host; then runs with calls in flight while the worker hosting a
supervisor is removed (its raylet killed); then runs while every supervisor is killed at once. The caseops
server is hosted in this process (on the head's machine), so its count of answers by run and node survives
every fault.

    python multinode_script.py '{"ports": [gcs, agent], "toolsets": PATH}'
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

CASE = {"case_id": "C-102"}
ECHO_PLAN = {"nodes": [{"id": "echo", "tool": "echo", "args": {"text": "placed"}}]}


def main() -> None:
    import ray
    from ray.cluster_utils import Cluster

    spec = json.loads(sys.argv[1])
    gcs_port, agent_port = spec["ports"]
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "gcs_server_port": gcs_port,
            "dashboard_agent_listen_port": agent_port,
            "resources": {"raydag-head": 1},
        },
    )
    workers = {
        "a": cluster.add_node(num_cpus=1, resources={"raydag-a": 1}),
        "b": cluster.add_node(num_cpus=1, resources={"raydag-b": 1, "files-host": 1}),
    }
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    nodes = {"head": cluster.head_node.node_id, **{name: node.node_id for name, node in workers.items()}}
    facts: dict[str, Any] = {"nodes": nodes}
    try:
        run(cluster, workers, spec["toolsets"], facts)
    finally:
        print(json.dumps(facts), flush=True)
        ray.shutdown()
        cluster.shutdown()


def run(cluster: Any, workers: dict[str, Any], toolsets: str, facts: dict[str, Any]) -> None:
    import ray

    import raydag

    with raydag.start(toolsets) as rd:
        runtime = rd._runtime
        supervisors = runtime.supervisors
        facts["supervisors"] = [ray.get(s.ping.remote())["node_id"] for s in supervisors]
        callers: dict[str, Any] = {}
        for supervisor in supervisors:
            callers.update(ray.get(supervisor.callers.remote()))
        facts["callers"] = {name: answer.get("node_id") for name, answer in callers.items()}

        # 1. Fault-free: runs spread over the supervisors; the placed server's calls are made on its node.
        fault_free = [rd.submit(resource=CASE) for _ in range(4)]
        placed = [rd.submit(ECHO_PLAN, resource={}, planner="outputs") for _ in range(2)]
        facts["fault_free"] = [summary(rd.wait(run_id, 180)) for run_id in fault_free]
        facts["placed"] = [summary(rd.wait(run_id, 180)) for run_id in placed]
        facts["owners"] = owners(runtime.dsn, fault_free)

        # 2. A worker hosting a supervisor (and callers) removed while its runs have calls in flight.
        victim = next(name for name, node in workers.items() if node.node_id in facts["supervisors"])
        removed = [rd.submit(resource=CASE) for _ in range(6)]
        wait_for_calls(rd, removed)
        cluster.remove_node(workers[victim], allow_graceful=False)
        facts["removed_node"] = victim
        facts["removed"] = [summary(rd.wait(run_id, 300)) for run_id in removed]

        # 3. Every supervisor killed at once while their runs have calls in flight; Ray starts them again.
        restarted = [rd.submit(resource=CASE) for _ in range(4)]
        wait_for_calls(rd, restarted)
        for supervisor in supervisors:
            ray.kill(supervisor, no_restart=False)
        facts["restarted"] = [summary(rd.wait(run_id, 300)) for run_id in restarted]

        everything = [*fault_free, *removed, *restarted]
        facts["events"] = events(runtime.dsn, everything)
        facts["answered"] = dict(runtime.tool_server.answered)


def summary(run: Any) -> dict[str, Any]:
    failed = [
        {
            "node_id": node["node_id"],
            "status": node["status"],
            "error": node["error"],
            "history": node["history"],
        }
        for node in run.nodes
        if node["status"] not in ("succeeded", "reused", "pending")
    ]
    return {
        "run_id": run.run_id,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "result": run.result,
        "failed": failed,
    }


def wait_for_calls(rd: Any, run_ids: list[str], within_s: float = 60) -> None:
    """Until a call of each run is out (or, for a run already past it, has landed)."""
    deadline = time.monotonic() + within_s
    pending = set(run_ids)
    while pending and time.monotonic() < deadline:
        for run_id in list(pending):
            if any(node["status"] != "pending" for node in rd.get(run_id).nodes):
                pending.discard(run_id)
        time.sleep(0.05)


def owners(dsn: str, run_ids: list[str]) -> dict[str, str]:
    """Each run's owner when it ended, as its row holds it."""

    async def read() -> dict[str, str]:
        import asyncpg

        connection = await asyncpg.connect(dsn)
        try:
            rows = await connection.fetch(
                "SELECT run_id::text, owner FROM runs WHERE run_id::text = ANY($1::text[])", run_ids
            )
            return {row["run_id"]: row["owner"] for row in rows}
        finally:
            await connection.close()

    return asyncio.run(read())


def events(dsn: str, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each run's events, in order: who created it, who recovered it from whom, what was dispatched again."""

    async def read() -> dict[str, list[dict[str, Any]]]:
        import asyncpg

        connection = await asyncpg.connect(dsn)
        try:
            rows = await connection.fetch(
                """SELECT run_id::text, data::text FROM run_events WHERE run_id::text = ANY($1::text[])
                   ORDER BY run_id, seq""",
                run_ids,
            )
        finally:
            await connection.close()
        found: dict[str, list[dict[str, Any]]] = {run_id: [] for run_id in run_ids}
        for row in rows:
            found[row["run_id"]].append(json.loads(row["data"]))
        return found

    return asyncio.run(read())


if __name__ == "__main__":
    main()

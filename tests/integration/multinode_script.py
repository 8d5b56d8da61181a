"""A raydag deployment over a three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and
two workers, each a raylet of its own on loopback ports of its own), driven by ``import raydag`` with two
supervisors. Run as a program by ``test_multinode.py``, in a process of its own (one Ray per process); it prints
what it found as one JSON object, and the test decides.

What it does: where the supervisors and their callers were placed; runs over the shipped caseops server and a
stdio server that only one worker may host; then runs with calls in flight while the worker hosting a
supervisor is removed (its raylet killed); then runs while every supervisor is killed at once (in each of
these three, runs whose agent nodes are child runs of their own, too); then a
supervisor killed for good while the other is overloaded (runs waiting for a turn). Through the faults,
clients of the run API (Ray Serve, its replica and proxy on the head) submit and read runs and keep every 5xx
they are answered. The caseops server is hosted in this process (on the head's machine), so its count of
answers by run and node survives every fault.

    python multinode_script.py '{"ports": [gcs, agent, api], "toolsets": PATH}'
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import uuid
from typing import Any

CASE = {"case_id": "C-102"}
DEMO_KEY = "dev-key-tenant-demo"
"""A documented dev key (``RAYDAG_API_KEYS`` unset, on loopback): tenant-demo, every caseops scope."""
ECHO_PLAN = {"nodes": [{"id": "echo", "tool": "echo", "args": {"text": "placed"}}]}


def agent_node(node_id: str, goal: str, tool: str) -> dict[str, Any]:
    """An agent node whose child run calls ``tool`` once, given the parent's ``case`` as its input."""
    child = {"nodes": [{"id": tool.rsplit("_", 1)[-1], "tool": tool, "args": CASE}]}
    return {"id": node_id, "agent": {"goal": goal, "plan": child}, "args": {"case": {"$ref": "case"}}}


AGENT_PLAN = {
    "nodes": [
        {"id": "case", "tool": "caseops_get_case_snapshot", "args": CASE},
        agent_node("policy_agent", "read the policy", "caseops_get_policy_requirements"),
        agent_node("docs_agent", "list the documents", "caseops_list_unclassified_documents"),
    ]
}
"""A parent whose two agent nodes are child runs of their own, side by side once ``case`` has answered."""
OVERLOAD_LATENCY_MS = 1_500
"""Each caseops call while one supervisor is being overloaded, so a run lasts seconds whatever the machine's load
(in one CI run, 24 runs submitted one after another each ended before the next came, and none waited for a turn)."""


def local_cluster(gcs_port: int, agent_port: int, head_resources: dict[str, float] | None = None) -> Any:
    """A ``ray.cluster_utils.Cluster`` with its head up (two CPUs, no dashboard) on ports of its own: the GCS's
    default, 6379, is Redis's on this machine."""
    from ray.cluster_utils import Cluster

    return Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "gcs_server_port": gcs_port,
            "dashboard_agent_listen_port": agent_port,
            "resources": head_resources or {},
        },
    )


def main() -> None:
    import ray

    spec = json.loads(sys.argv[1])
    gcs_port, agent_port, api_port = spec["ports"]
    cluster = local_cluster(gcs_port, agent_port, {"raydag-head": 1})
    workers = {
        "a": cluster.add_node(num_cpus=1, resources={"raydag-a": 1}),
        "b": cluster.add_node(num_cpus=1, resources={"raydag-b": 1, "files-host": 1}),
    }
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    nodes = {"head": cluster.head_node.node_id, **{name: node.node_id for name, node in workers.items()}}
    facts: dict[str, Any] = {"nodes": nodes}
    try:
        run(cluster, workers, spec["toolsets"], api_port, facts)
    finally:
        print(json.dumps(facts), flush=True)
        ray.shutdown()
        cluster.shutdown()


def run(cluster: Any, workers: dict[str, Any], toolsets: str, api_port: int, facts: dict[str, Any]) -> None:
    import ray
    from ray import serve

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
        trees = {"fault_free": [rd.submit(AGENT_PLAN, resource=CASE, planner="outputs")]}
        facts["fault_free"] = [summary(rd.wait(run_id, 180)) for run_id in fault_free]
        facts["placed"] = [summary(rd.wait(run_id, 180)) for run_id in placed]
        facts["owners"] = owners(runtime.dsn, fault_free)

        # The run API over the same supervisors; its clients keep at it through every fault below.
        clients = Clients(serve_api(runtime, api_port))
        clients.start()
        try:
            # 2. A worker hosting a supervisor (and callers) removed while its runs have calls in flight.
            victim = next(name for name, node in workers.items() if node.node_id in facts["supervisors"])
            removed = [rd.submit(resource=CASE) for _ in range(6)]
            trees["removed"] = [rd.submit(AGENT_PLAN, resource=CASE, planner="outputs") for _ in range(2)]
            wait_for_calls(rd, [*removed, *trees["removed"]])
            cluster.remove_node(workers[victim], allow_graceful=False)
            facts["removed_node"] = victim
            facts["removed"] = [summary(rd.wait(run_id, 300)) for run_id in removed]

            # 3. Every supervisor killed at once while their runs have calls in flight; Ray starts them again.
            restarted = [rd.submit(resource=CASE) for _ in range(4)]
            trees["restarted"] = [rd.submit(AGENT_PLAN, resource=CASE, planner="outputs") for _ in range(2)]
            wait_for_calls(rd, [*restarted, *trees["restarted"]])
            for supervisor in supervisors:
                ray.kill(supervisor, no_restart=False)
            facts["restarted"] = [summary(rd.wait(run_id, 300)) for run_id in restarted]

            # 4. One supervisor killed for good while the other is overloaded: more runs than it drives at
            # once (RAYDAG_MAX_ACTIVE_RUNS), some waiting for a turn. The survivor takes the dead one's over.
            # The caseops server answers slowly meanwhile, so runs stay in flight however fast they are made.
            survivor, doomed = supervisors
            runtime.tool_server.simulate(latency_ms=OVERLOAD_LATENCY_MS)
            overloaded, facts["survivor_load"] = overload(rd, survivor)
            ray.kill(doomed, no_restart=True)
            runtime.tool_server.simulate(latency_ms=0)
            facts["overloaded"] = [summary(rd.wait(run_id, 300)) for run_id in overloaded]
            facts["overloaded_owners"] = owners(runtime.dsn, overloaded)
            facts["survivor"] = ray.get(survivor.ping.remote())["owner"]
        finally:
            clients.stop()
            serve.shutdown()
        facts["http"] = [summary(rd.wait(run_id, 300)) for run_id in clients.created]
        facts["http_answers"] = dict(clients.answers)
        facts["http_errors"] = clients.errors

        facts["trees"] = {
            phase: [summary(rd.wait(run_id, 300)) for run_id in ids] for phase, ids in trees.items()
        }
        parents = [run_id for ids in trees.values() for run_id in ids]
        facts["children"] = children(runtime.dsn, parents)
        everything = [*fault_free, *removed, *restarted, *overloaded, *clients.created, *parents]
        facts["events"] = events(runtime.dsn, [*everything, *facts["children"]])
        facts["answered"] = dict(runtime.tool_server.answered)


def serve_api(runtime: Any, port: int) -> str:
    """The run API under Ray Serve, over ``runtime``'s supervisors: its proxy and replica on the head (a client
    needs an address that stays), the supervisors where they are. Its URL once ``/readyz`` answers 200."""
    import httpx
    import ray
    from ray import serve

    from actors.api.app import ApiConfig, RunAPI
    from actors.launch.local import supervisor_config

    settings = runtime.settings
    config = ApiConfig(
        supervisor=supervisor_config(
            settings,
            dsn=runtime.dsn,
            mcp_url=runtime.mcp_url,
            token_key=runtime.token_key,
            toolsets=runtime.toolsets,
        ),
        api_keys=settings.api_key_grants(),
        supervisor_name=ray.get(runtime.supervisor.ping.remote())["owner"],
        supervisors=len(runtime.supervisors),
    )
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    on_head = {"num_cpus": 0, "resources": {"raydag-head": 0.001}}
    serve.run(
        RunAPI.options(num_replicas=1, ray_actor_options=on_head).bind(config, False),  # type: ignore[attr-defined]
        name="raydag",
        route_prefix="/",
        blocking=False,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(base + "/readyz", timeout=5).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the run API never became ready")
        time.sleep(0.5)


class Clients:
    """A client of the run API in a thread of its own: it submits a run every few seconds (a 503 retried with
    the same Idempotency-Key once its Retry-After has passed) and reads every run it created, keeping how often
    each status was answered and every 5xx whole (status, problem type, Retry-After)."""

    RUNS = 8
    EVERY_S = 3.0

    def __init__(self, base: str) -> None:
        self.base = base
        self.created: list[str] = []
        self.answers: dict[int, int] = {}
        self.errors: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="api-clients", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        import httpx

        key: str | None = None
        next_submission = 0.0
        with httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {DEMO_KEY}"}, timeout=30
        ) as http:
            while not self._stop.is_set():
                if len(self.created) < self.RUNS and time.monotonic() >= next_submission:
                    key = key or str(uuid.uuid4())
                    answer = self._send(http, "POST", "/runs", json=CASE, headers={"Idempotency-Key": key})
                    if answer is not None and answer.status_code in (200, 201):
                        self.created.append(answer.json()["run_id"])
                        key, next_submission = None, time.monotonic() + self.EVERY_S
                    elif answer is not None and answer.status_code == 503:
                        retry_after = float(answer.headers.get("retry-after") or 1)
                        next_submission = time.monotonic() + min(retry_after, 2.0)
                for run_id in list(self.created):
                    self._send(http, "GET", f"/runs/{run_id}")
                self._stop.wait(0.5)

    def _send(self, http: Any, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            answer = http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:  # no answer at all: as much a failure as a 5xx
            self.errors.append({"request": f"{method} {path}", "status": None, "error": type(exc).__name__})
            return None
        self.answers[answer.status_code] = self.answers.get(answer.status_code, 0) + 1
        if answer.status_code >= 500:
            body = answer.json() if answer.headers.get("content-type") == "application/problem+json" else {}
            self.errors.append(
                {
                    "request": f"{method} {path}",
                    "status": answer.status_code,
                    "type": body.get("type"),
                    "retry_after": answer.headers.get("retry-after"),
                    "text": answer.text[:300],
                }
            )
        return answer


def overload(rd: Any, supervisor: Any, burst: int = 8, most: int = 24) -> tuple[list[str], dict[str, Any]]:
    """Runs submitted (each supervisor in turn) ``burst`` at a time until ``supervisor`` owns more than it drives
    at once, some waiting for a turn (``most`` at the outside); the runs, and its ping once it does. In bursts,
    not one by one: a supervisor whose listing of its servers is still under way (a server's only node lost)
    takes a second to answer a ping, and runs submitted a second apart never overlap enough."""
    import ray

    submitted: list[str] = []
    while True:
        submitted.extend(rd.submit(resource=CASE) for _ in range(burst))
        answer: dict[str, Any] = ray.get(supervisor.ping.remote())
        if answer["waiting_runs"] > 0 or len(submitted) >= most:
            return submitted, answer


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


def children(dsn: str, parents: list[str]) -> dict[str, dict[str, Any]]:
    """The child runs of ``parents``: each one's parent, its node there, and its status."""

    async def read() -> dict[str, dict[str, Any]]:
        import asyncpg

        connection = await asyncpg.connect(dsn)
        try:
            rows = await connection.fetch(
                """SELECT run_id::text, parent_run_id::text, parent_node_id, status FROM runs
                   WHERE parent_run_id::text = ANY($1::text[])""",
                parents,
            )
            return {
                row["run_id"]: {key: row[key] for key in ("parent_run_id", "parent_node_id", "status")}
                for row in rows
            }
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

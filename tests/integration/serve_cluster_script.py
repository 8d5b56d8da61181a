"""``raydag serve`` joined to a two-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and a
worker, each a raylet of its own on loopback ports of its own), then the worker removed while clients use the
API. Run as a program by ``test_serve_cluster.py``, in a process of its own (one Ray per process); it prints
what it found as one JSON object, and the test decides.

What it finds: where Serve's proxies and the API's replicas run, and each proxy's state and actor, once the API
is ready and again after the worker is gone; where the supervisors ran; every answer the API's clients got
(``multinode_script.Clients``) from before the removal until the API is ready again and a run submitted after
it has been created; how each run they created ended; how ``raydag serve`` exited on SIGTERM.

    python serve_cluster_script.py '{"ports": [gcs, agent, api], "log": PATH}'
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from multinode_script import DEMO_KEY, Clients, local_cluster

from dag.states import RunStatus

RAYDAG = str(Path(sys.executable).parent / "raydag")
READY_S = 150
RECOVERY_S = 90
RUNS_END_S = 120
STOP_S = 120


def main() -> None:
    import ray

    spec = json.loads(sys.argv[1])
    gcs_port, agent_port, api_port = spec["ports"]
    cluster = local_cluster(gcs_port, agent_port)
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    facts: dict[str, Any] = {"nodes": {"head": cluster.head_node.node_id, "worker": worker.node_id}}
    log = Path(spec["log"])
    with log.open("wb") as output:
        serve = subprocess.Popen(
            [RAYDAG, "serve"],
            env={**os.environ, "RAY_ADDRESS": cluster.address, "RAYDAG_PORT": str(api_port)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        ray.init(address=cluster.address, logging_level="WARNING")
        run(cluster, worker, f"http://127.0.0.1:{api_port}", serve, facts)
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            try:
                facts["serve_exit"] = serve.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                serve.kill()
                facts["serve_exit"] = serve.wait(timeout=30)
        facts["serve_log"] = log.read_text(errors="replace")[-3000:]
        print(json.dumps(facts), flush=True)
        ray.shutdown()
        cluster.shutdown()


def run(cluster: Any, worker: Any, base: str, serve: subprocess.Popen[bytes], facts: dict[str, Any]) -> None:
    import httpx

    wait_ready(base, serve, READY_S)
    facts["ready"] = placement()
    facts["supervisors"] = supervisor_nodes()

    clients = Clients(base)
    clients.start()
    try:
        deadline = time.monotonic() + RECOVERY_S
        while not clients.created:  # the API is in use when the worker goes
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API created no run within {RECOVERY_S:g} s: {clients.errors}")
            time.sleep(0.2)
        cluster.remove_node(worker, allow_graceful=False)
        removed_at = len(clients.created)
        # Until the API is ready again and has created a run submitted after the removal.
        deadline = time.monotonic() + RECOVERY_S
        while len(clients.created) <= removed_at or not ready(base):
            if time.monotonic() > deadline:
                facts["recovered"] = False
                break
            time.sleep(0.5)
        else:
            facts["recovered"] = True
    finally:
        clients.stop()
    facts["after"] = placement()
    facts["http_answers"] = clients.answers
    facts["http_errors"] = clients.errors

    statuses: dict[str, str] = {}
    deadline = time.monotonic() + RUNS_END_S
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {DEMO_KEY}"}) as http:
        while time.monotonic() < deadline:
            statuses = {run_id: http.get(f"/runs/{run_id}").json()["status"] for run_id in clients.created}
            if all(RunStatus(status).terminal for status in statuses.values()):
                break
            time.sleep(1)
    facts["runs"] = statuses  # each run's status when all had ended, or when RUNS_END_S had passed

    serve.send_signal(signal.SIGTERM)
    facts["serve_exit"] = serve.wait(timeout=STOP_S)


def wait_ready(base: str, serve: subprocess.Popen[bytes], within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not ready(base):
        if serve.poll() is not None:
            raise RuntimeError(f"raydag serve exited ({serve.returncode}) before it was ready")
        if time.monotonic() > deadline:
            raise RuntimeError(f"raydag serve was not ready within {within_s:g} s")
        time.sleep(0.5)


def ready(base: str) -> bool:
    import httpx

    try:
        return httpx.get(base + "/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def placement() -> dict[str, Any]:
    """Serve's proxies (node → state and actor) and the API's replicas (their nodes), as Serve's controller
    reports them (what ``serve status`` and the dashboard show)."""
    from ray.serve.context import _get_global_client
    from ray.serve.schema import ServeInstanceDetails

    details = ServeInstanceDetails(**_get_global_client().get_serve_details())
    deployment = details.applications["raydag"].deployments["raydag-api"]
    return {
        "proxies": {
            node: {"status": proxy.status.value, "actor": proxy.actor_id}
            for node, proxy in details.proxies.items()
        },
        "replicas": [replica.node_id for replica in deployment.replicas if replica.state.value == "RUNNING"],
    }


def supervisor_nodes() -> list[str]:
    import ray

    from actors.supervisor import NAMESPACE, supervisor_names

    names = supervisor_names(os.environ["RAYDAG_SUPERVISOR_NAME"], int(os.environ["RAYDAG_SUPERVISORS"]))
    return [
        ray.get(ray.get_actor(name, namespace=NAMESPACE).ping.remote(), timeout=30)["node_id"]
        for name in names
    ]


if __name__ == "__main__":
    main()

"""Run metrics reach Ray: C-102 runs through a real supervisor, read back from each node's metrics agent.

The agent serves Prometheus text at ``http://<node>:<MetricsExportPort>/metrics`` (``ray.nodes()``), with
the test session's ``include_dashboard=False`` too. Workers report to it periodically (every ~10 s by
default), so the test polls, within a bound, until the counts it expects have arrived.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from actors.observe.metrics import LATENCY_BOUNDARIES_MS
from actors.run.submission import RunRequest, Submission
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES, SCOPE_CASES, SCOPE_POLICIES
from mcp_server.planner import CASE_TOOL, DOCUMENTS_TOOL, POLICY_TOOL, RESOLVE_TOOL
from tests.integration.conftest import RunningToolServer, database_of_its_own, supervisor_for

PRINCIPAL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))
WITHOUT_DOCUMENTS = Principal("tenant-demo", "limited", frozenset({SCOPE_CASES, SCOPE_POLICIES}))
EXPORT_WAIT_S = 90.0
LABELS = frozenset(
    {"planner", "status", "stop_reason", "tool", "outcome", "error_kind", "rule_id", "budget", "le"}
)
"""Our tags and the histogram's ``le``; Ray adds its own (WorkerId, NodeAddress, SessionName, …), which the
comparison leaves out."""

Sample = tuple[str, tuple[tuple[str, str], ...]]


@pytest.fixture(scope="module")
def metered_worker(
    ray_cluster: None, admin_dsn: str, tool_server: RunningToolServer, token_key: bytes
) -> Iterator[str]:
    """The Ray worker (the ``WorkerId`` label of its metrics) of a supervisor of its own, so its counters
    start at zero, that ran a C-102 run with every scope and one without the documents scope.

    Its database is its own too: the sweep's gauges count the whole database's unknown operations, and
    other tests leave some in the session's."""
    import ray

    with database_of_its_own(admin_dsn) as dsn:
        supervisor = supervisor_for(
            dsn, tool_server, token_key, f"raydag-test-metrics-{uuid.uuid4().hex[:6]}"
        )
        try:
            yield metered_runs(supervisor)
        finally:
            ray.kill(supervisor)


def metered_runs(supervisor: Any) -> str:
    """Run the two C-102 runs on ``supervisor``; its worker's id."""
    import ray

    worker_id = ray.get(supervisor.ping.remote())["worker_id"]
    for principal in (PRINCIPAL, WITHOUT_DOCUMENTS):
        submitted = ray.get(
            supervisor.submit.remote(RunRequest(principal=principal, resource={"case_id": "C-102"}))
        )
        assert submitted.outcome is Submission.CREATED
        assert ray.get(supervisor.wait.remote(submitted.run_id, 60.0))
    return worker_id


def raydag_samples(worker_id: str) -> dict[Sample, float]:
    """Every ``ray_raydag_*`` sample ``worker_id`` reported, from the metrics agent of each live node."""
    import ray
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[Sample, float] = {}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
            for sample in family.samples:
                if not sample.name.startswith("ray_raydag_") or sample.labels.get("WorkerId") != worker_id:
                    continue
                tags = tuple(sorted((key, value) for key, value in sample.labels.items() if key in LABELS))
                samples[sample.name, tags] = sample.value
    return samples


def counts(samples: dict[Sample, float]) -> dict[Sample, float]:
    """Counters and histogram counts: what must be exact (a histogram's sum is approximate in Ray)."""
    return {key: value for key, value in samples.items() if not key[0].endswith(("_bucket", "_sum"))}


async def reported(worker_id: str, expected: dict[Sample, float]) -> dict[Sample, float]:
    """The worker's samples once their counts match ``expected``, or the last ones read when
    ``EXPORT_WAIT_S`` ran out (the caller's assertion then shows the difference)."""
    deadline = time.monotonic() + EXPORT_WAIT_S
    while True:
        samples = await asyncio.to_thread(raydag_samples, worker_id)
        if counts(samples) == expected or time.monotonic() > deadline:
            return samples
        await asyncio.sleep(1.0)


def sample(name: str, **tags: str) -> Sample:
    return name, tuple(sorted(tags.items()))


async def test_a_supervisors_runs_reach_rays_metrics_agent_as_raydag_counters_and_latencies(
    metered_worker: str,
) -> None:
    finished, latency = "ray_raydag_nodes_finished_total", "ray_raydag_node_latency_ms_count"
    expected = {
        sample("ray_raydag_runs_started_total", planner="conformance"): 2.0,
        sample("ray_raydag_runs_finished_total", status="completed", stop_reason="none"): 1.0,
        sample(
            "ray_raydag_runs_finished_total", status="needs_human", stop_reason="INSUFFICIENT_EVIDENCE"
        ): 1.0,
        sample("ray_raydag_nodes_denied_total", tool=DOCUMENTS_TOOL, rule_id="scope.missing"): 1.0,
        sample(finished, tool=CASE_TOOL, status="succeeded"): 2.0,
        sample(finished, tool=POLICY_TOOL, status="succeeded"): 2.0,
        sample(finished, tool=DOCUMENTS_TOOL, status="succeeded"): 1.0,
        sample(finished, tool=DOCUMENTS_TOOL, status="denied"): 1.0,
        sample(finished, tool=RESOLVE_TOOL, status="succeeded"): 1.0,  # resolve[0] of the complete run
        sample(finished, tool=RESOLVE_TOOL, status="skipped"): 1.0,  # the other run's never-expanded resolve
        sample(latency, tool=CASE_TOOL, outcome="succeeded"): 2.0,
        sample(latency, tool=POLICY_TOOL, outcome="succeeded"): 2.0,
        sample(latency, tool=DOCUMENTS_TOOL, outcome="succeeded"): 1.0,
        sample(latency, tool=RESOLVE_TOOL, outcome="succeeded"): 1.0,
        # The sweep's gauges (every 10 s): these runs wrote nothing, so no write's outcome is unknown.
        sample("ray_raydag_operations_unknown"): 0.0,
        sample("ray_raydag_operation_unknown_oldest_seconds"): 0.0,
    }

    samples = await reported(metered_worker, expected)

    assert counts(samples) == expected
    snapshot_buckets = {
        dict(tags)["le"]: value
        for (name, tags), value in samples.items()
        if name == "ray_raydag_node_latency_ms_bucket" and ("tool", CASE_TOOL) in tags
    }
    assert list(snapshot_buckets) == [*(str(float(bound)) for bound in LATENCY_BOUNDARIES_MS), "+Inf"]
    assert snapshot_buckets["+Inf"] == 2.0
    assert list(snapshot_buckets.values()) == sorted(snapshot_buckets.values())  # cumulative

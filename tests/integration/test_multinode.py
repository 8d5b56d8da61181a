"""raydag on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``: a head and two
workers on loopback ports of their own), in a process of its own (``multinode_script.py``): supervisors and
callers spread over the nodes, a server placed on the one node that may host it, and a node removed mid-run —
or every supervisor killed at once, or one killed for good while the other is overloaded — changes no answer,
re-runs nothing that succeeded, and gets no 5xx from the run API but a 503 with Retry-After. Calls are counted
by the caseops server itself (its answers by run and node)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO
from tests.integration.test_cli import environment
from tests.loopback import free_port
from tests.processes import program_findings

SCRIPT = REPO / "tests" / "integration" / "multinode_script.py"
TOY = REPO / "tests" / "integration" / "toy_mcp_server.py"


def toolsets_file(folder: Path) -> Path:
    """The shipped caseops toolset, and the tests' toy server over stdio, which only a node offering the custom
    resource ``files-host`` may run."""
    declared = yaml.safe_load((REPO / "mcp_server" / "caseops.yaml").read_text(encoding="utf-8"))
    declared["servers"].append(
        {
            "name": "toy",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(TOY)],
            "placement": {"resources": {"files-host": 0.01}},
            "timeouts": {"connect_s": 30, "call_s": 10},
            "tools": {"echo": {"scope": "cases:read", "risk": "read_only"}},
        }
    )
    path = folder / "toolsets.yaml"
    path.write_text(yaml.safe_dump(declared), encoding="utf-8")
    return path


def run_cluster(dsn: str, folder: Path) -> dict[str, Any]:
    spec = {"ports": [free_port(), free_port(), free_port()], "toolsets": str(toolsets_file(folder))}
    env = environment(
        folder / "home",
        RAYDAG_DATABASE_URL=dsn,
        RAYDAG_SUPERVISORS="2",
        RAYDAG_TOOL_CALLERS="2",
        RAYDAG_DB_POOL_SIZE="2",  # beside the rest of the suite, within PostgreSQL's 100 connections
        RAYDAG_LEASE_S="3",
        RAYDAG_MAX_ACTIVE_RUNS="3",  # a supervisor given more runs than that is overloaded: they wait
        RAYDAG_TOOL_LATENCY_MS="1000",  # calls are still out when a node goes
    )
    env.pop("RAY_ADDRESS", None)  # the script's cluster is its own
    facts, stderr = program_findings(SCRIPT, spec, cwd=folder, env=env, timeout_s=900)
    facts["stderr"] = stderr
    return facts


def agent_answer(run: dict[str, Any]) -> str:
    """A tree's answer without the ids of its child runs (each agent node's output names its own)."""
    outputs = {
        node: {key: value for key, value in output.items() if key != "run_id"}
        if "run_id" in output
        else output
        for node, output in run["result"]["outputs"].items()
    }
    return json.dumps(outputs, sort_keys=True)


def test_a_three_node_cluster_spreads_the_work_and_a_lost_node_changes_no_answer(
    dsn: str, tmp_path: Path
) -> None:
    facts = run_cluster(dsn, tmp_path)
    nodes = facts["nodes"]

    # Two supervisors, on two nodes; the shared callers spread; the toy server's callers only on its node.
    assert len(set(facts["supervisors"])) == 2, facts["supervisors"]
    placed = {name: node for name, node in facts["callers"].items() if "-tool-caller-toy-" in name}
    shared = {name: node for name, node in facts["callers"].items() if name not in placed}
    assert (len(placed), set(placed.values())) == (4, {nodes["b"]}), facts["callers"]
    assert len(shared) == 4, facts["callers"]
    assert len(set(shared.values())) >= 2, facts["callers"]
    assert {run["status"] for run in facts["placed"]} == {"completed"}, facts["placed"]
    assert len(set(facts["owners"].values())) == 2, facts["owners"]  # new runs went to both supervisors

    # Every run ends with the fault-free answer, through a lost node and a restart of every supervisor.
    [expected] = {json.dumps(run["result"], sort_keys=True) for run in facts["fault_free"]}
    for phase in ("fault_free", "removed", "restarted", "overloaded", "http"):
        for run in facts[phase]:
            assert (run["status"], json.dumps(run["result"], sort_keys=True)) == ("completed", expected), (
                phase,
                run["status"],
                run["stop_reason"],
                run["failed"],
            )

    # Runs whose agent nodes are child runs: the same answer through a lost node and a restart of every
    # supervisor (each agent's output names its own child run, so the answer compared leaves the id out), and
    # every child completed, its parent's own. Their calls are among those counted below.
    [tree_answer] = {agent_answer(run) for run in facts["trees"]["fault_free"]}
    for phase in ("removed", "restarted"):
        for run in facts["trees"][phase]:
            assert (run["status"], agent_answer(run)) == ("completed", tree_answer), (phase, run)
    parents = [run["run_id"] for runs in facts["trees"].values() for run in runs]
    assert sorted(child["parent_run_id"] for child in facts["children"].values()) == sorted(parents * 2)
    assert {child["status"] for child in facts["children"].values()} == {"completed"}, facts["children"]

    # The survivor had runs waiting for a turn when the other was killed for good, and took its runs over.
    assert facts["survivor_load"]["waiting_runs"] > 0, facts["survivor_load"]
    assert set(facts["overloaded_owners"].values()) == {facts["survivor"]}, facts["overloaded_owners"]

    # The run API's clients, through all of it: runs created and read; no 5xx but a 503 saying when to retry.
    assert facts["http"], facts["http_answers"]
    assert facts["http_answers"].get("200", 0) > 0, facts["http_answers"]
    for error in facts["http_errors"]:
        assert (error["status"], bool(error.get("retry_after"))) == (503, True), facts["http_errors"]

    # Nothing was called that raydag did not dispatch, and it dispatches again only what has not succeeded
    # (the transition table): a node's answers are at most its recorded dispatches — a first call, a retry
    # after its caller's node went (WORKER_FAILED), a call that was out when its supervisor went (dispatched
    # again by the recovery). One owner at a time: each takeover is from the owner before it.
    dispatched: Counter[str] = Counter()
    recovered = 0
    for run_id, events in facts["events"].items():
        owner = None
        for event in events:
            if event["kind"] == "node_dispatched":
                dispatched[f"{run_id}/{event['node_id']}"] += 1
            elif event["kind"] == "run_recovered":  # what it dispatches again is recorded as dispatched
                recovered += 1
                assert owner is None or event["previous_owner"] == owner, (run_id, events)
                owner = event["owner"]
    assert recovered > 0, "no run was recovered: the faults missed every run"
    counted = {
        task: answers for task, answers in facts["answered"].items() if task.split("/")[0] in facts["events"]
    }
    assert counted, facts["answered"]
    for task, answers in counted.items():
        assert answers <= dispatched[task], (task, answers, dispatched[task])

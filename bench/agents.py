"""Sub-agents: a DAG of loop agents against its critical path, against one agent doing the same steps in sequence,
and the cost of a child run, side by side in one run.

Every arm runs the production path of ``bench._harness``: a ``BenchSupervisor`` actor hosting a ``RunService``
with the shipped caller actors, PostgreSQL, and ``bench_wait`` on the MCP tool server (a process of its own).
Each agent is a loop agent node (``{"agent": {"loop": {"max_steps": N}}}``): a child run planned step by step by
the model planner over a mock Responses endpoint on loopback, which answers at once: at each step it proposes
one ``bench_wait`` call of ``TOOL_MS`` (a call of its own: the step's name is in its arguments), and judges
``replan`` until its agent has taken its steps, then ``final``. Each step is two model calls.

- ``8 agents in parallel``: a parent of ``AGENTS`` sibling loop agents of ``STEPS`` steps each.
- ``one agent, the same steps in sequence``: a parent of one loop agent of ``AGENTS × STEPS`` steps.
- ``one agent``: a parent of one loop agent of ``STEPS`` steps.
- ``the same steps, a run of its own``: a run the model planner plans, of ``STEPS`` rounds, with no parent:
  what a loop agent is without the child run around it.

The makespan of a parent runs from its first node's dispatch to its last node's recorded success; of a run of
its own, from its creation to its end (the supervisor's clock, from the runs' events). The critical path is the
tools' latency along one agent's steps (the model answers at once). CPU is every process of the benchmark
(``bench._cpu``), the mock model's thread in the benchmark process included. Arms alternate within each
sample, their order rotated.
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import uuid
from collections import defaultdict
from datetime import datetime
from typing import Any

import asyncpg

from actors.run.submission import RunRequest
from bench._cpu import wait_for_quiet
from bench._harness import PRINCIPAL, Bench, bench_runtime
from bench._smoke import sized
from bench._synthetic import BENCH_WAIT, CASE_ID
from dag.budget import BudgetRequest
from planner.registry import MODEL_PLANNER
from tests.mock_openai import MockModel, Reply

SAMPLES = sized(int(os.environ.get("BENCH_AGENTS_SAMPLES", "3")), 1)
AGENTS = sized(8, 2)
STEPS = sized(5, 2)
TOOL_MS = sized(100, 10)
WARMUP = sized(1, 0)

PARALLEL = f"{AGENTS} agents in parallel"
SEQUENCE = "one agent, the same steps in sequence"
ONE = "one agent"
OWN = "the same steps, a run of its own"
ARMS = (PARALLEL, SEQUENCE, ONE, OWN)

GOAL = "bench agent {name}: {steps} steps"
_GOAL = re.compile(r"bench agent (\S+): (\d+) steps")
_ROUND = re.compile(r"This is round (\d+)\.")
_OBSERVED = f'"tool": "{BENCH_WAIT.name}"'


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The mock model: each step one ``bench_wait`` call of its own; ``final`` once its agent took its steps."""
    text = "\n".join(message["content"] for message in body["input"])
    found = _GOAL.search(text)
    if found is None:
        raise ValueError("a request without a bench agent's goal")
    name, steps = found.group(1), int(found.group(2))
    if body["text"]["format"]["name"] == "raydag_plan":
        step = int(round_found.group(1)) if (round_found := _ROUND.search(text)) else 1
        args = {"case_id": CASE_ID, "node": f"{name}-s{step}", "ms": TOOL_MS, "payload_kb": 0, "upstream": []}
        node: dict[str, Any] = {
            "id": f"s{step}",
            "tool": BENCH_WAIT.name,
            "args": args,
            "for_each": None,
            "after": [],
        }
        return {"question": None, "nodes": [node]}
    if text.count(_OBSERVED) < steps:
        return {"decision": "replan", "reason": "the next step", "result": None, "citations": []}
    result = {"summary": f"{name} took its {steps} steps", "findings": []}
    return {"decision": "final", "reason": "done", "result": result, "citations": []}


def agent(name: str, steps: int) -> dict[str, Any]:
    body = {
        "goal": GOAL.format(name=name, steps=steps),
        "loop": {"max_steps": steps},
        "tools": [BENCH_WAIT.name],
    }
    return {"id": name, "agent": body}


def request(arm: str) -> tuple[RunRequest, int]:
    """The arm's run, and the steps its agents take in all."""
    resource = {"case_id": CASE_ID}
    if arm == OWN:
        own = RunRequest(
            principal=PRINCIPAL,
            resource=resource,
            planner=MODEL_PLANNER,
            goal=GOAL.format(name="own", steps=STEPS),
            budgets=BudgetRequest(max_replans=STEPS - 1),
        )
        return own, STEPS
    agents = {
        PARALLEL: [agent(f"a{index}", STEPS) for index in range(AGENTS)],
        SEQUENCE: [agent("seq", AGENTS * STEPS)],
        ONE: [agent("one", STEPS)],
    }[arm]
    plan = {"nodes": agents}
    steps = sum(node["agent"]["loop"]["max_steps"] for node in agents)
    return RunRequest(principal=PRINCIPAL, resource=resource, planner="bench", plan=plan), steps


def critical_path_ms(arm: str) -> int:
    return TOOL_MS * (AGENTS * STEPS if arm == SEQUENCE else STEPS)


async def makespan_ms(dsn: str, run_id: str) -> float:
    """A completed parent's first dispatch to its last success; a completed run without agents, its creation to
    its end. Raises if the run did not complete."""
    connection = await asyncpg.connect(dsn)
    try:
        key = uuid.UUID(run_id)
        run = await connection.fetchrow("SELECT status, stop_reason, detail FROM runs WHERE run_id = $1", key)
        rows = await connection.fetch(
            "SELECT kind, data->>'at' AS at FROM run_events WHERE run_id = $1 ORDER BY seq", key
        )
    finally:
        await connection.close()
    if run is None or run["status"] != "completed":
        raise RuntimeError(f"run {run_id} did not complete: {dict(run) if run else None}")
    at: defaultdict[str, list[str]] = defaultdict(list)
    for row in rows:
        at[row["kind"]].append(row["at"])
    first, last = (
        (at["node_dispatched"][0], at["node_succeeded"][-1])
        if at["agent_started"]
        else (at["run_created"][0], at["run_finished"][0])
    )
    return (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds() * 1000


async def _measure(bench: Bench, model: MockModel) -> dict[str, list[dict[str, float]]]:
    samples: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for sample in range(WARMUP + SAMPLES):
        wait_for_quiet()
        shift = sample % len(ARMS)
        for arm in ARMS[shift:] + ARMS[:shift]:
            run, steps = request(arm)
            model.answer(*(Reply(respond) for _ in range(2 * steps)))
            with bench.cpu.measure() as used:
                run_id = await bench.supervisor.submit_and_wait.remote(run)
            makespan = await makespan_ms(bench.dsn, run_id)
            if model.script:
                raise RuntimeError(f"{arm}: the mock model has {len(model.script)} answers left unused")
            if sample >= WARMUP:
                samples[arm].append({"makespan_ms": makespan, "cpu_ms": sum(used.values()) * 1000})
    return samples


def main() -> None:
    model = MockModel().start()
    try:
        with bench_runtime(model_url=model.url) as bench:
            samples = asyncio.run(_measure(bench, model))
    finally:
        model.stop()

    def median(arm: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[arm])

    def spread(arm: str, key: str) -> str:
        values = [sample[key] for sample in samples[arm]]
        return f"{min(values):.0f}–{max(values):.0f}"

    print(
        f"\n### Sub-agents: {AGENTS} loop agents of {STEPS} steps, tools {TOOL_MS} ms, a mock model that answers "
        f"at once ({SAMPLES} samples per arm, medians)\n"
    )
    print(
        "| arm | steps | critical path ms | makespan ms (min–max) | makespan ÷ critical path | CPU ms (min–max) "
        "| CPU ms per step |"
    )
    print("|---|---|---|---|---|---|---|")
    for arm in ARMS:
        steps = request(arm)[1]
        makespan, cpu, critical = median(arm, "makespan_ms"), median(arm, "cpu_ms"), critical_path_ms(arm)
        print(
            f"| {arm} | {steps} | {critical} | {makespan:.0f} ({spread(arm, 'makespan_ms')}) | "
            f"{makespan / critical:.2f} | {cpu:.0f} ({spread(arm, 'cpu_ms')}) | {cpu / steps:.1f} |"
        )
    speedup = median(SEQUENCE, "makespan_ms") / median(PARALLEL, "makespan_ms")
    child_ms = median(ONE, "makespan_ms") - median(OWN, "makespan_ms")
    child_cpu = median(ONE, "cpu_ms") - median(OWN, "cpu_ms")
    step_ms = (median(OWN, "makespan_ms") - critical_path_ms(OWN)) / STEPS
    print(
        f"\n- {PARALLEL} against {SEQUENCE}: {speedup:.2f}× sooner (at most {AGENTS}×).\n"
        f"- A child run's own cost ({ONE} less {OWN}): {child_ms:.0f} ms of makespan, {child_cpu:.0f} ms of CPU.\n"
        f"- A step's cost beyond its tool (two model calls, a round's records), in a run of its own: "
        f"{step_ms:.0f} ms."
    )

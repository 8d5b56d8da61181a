"""Streamed plans against whole plans: time to first dispatch and makespan of a model-planned C-102 run.

Both arms run the production path — a ``RunSupervisor`` actor with the ``openai`` planner, Ray tasks, the
MCP tool server (a process of its own, with a simulated upstream latency per call) and PostgreSQL — against
one mock Responses endpoint on loopback that writes the same plan at the same rate:

- ``whole``: the planner asks without streaming; the mock answers once the whole plan is "written" (time to
  first token + one token per 1/TPS s), and the supervisor validates and dispatches the plan then.
- ``streamed``: the planner streams; the mock sends the same text one token at a time at the same pace, and
  the supervisor dispatches each node as soon as its JSON object is complete.

The joiner's answer is the same in both arms (not streamed, delayed by its own writing time). Times come
from the run's recorded events: from ``planning_started`` to the first ``node_dispatched``, to
``join_started`` (plan and tools done) and to ``run_finished``. Samples alternate between the arms.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import statistics
import uuid
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import asyncpg

from actors.launch.settings import shipped_toolsets
from actors.run.submission import RunRequest, Submission
from actors.supervisor import SupervisorConfig, get_or_create_supervisor
from bench._harness import fresh_database, tool_server_process
from bench._ray import local_ray
from bench._smoke import sized
from dag.budget import Budgets
from dag.policy import Principal
from mcp_server.contracts import ALL_SCOPES
from planner.openai_planner import OpenAISettings
from tests.c102 import C102_PLAN, FINAL
from tests.mock_openai import Json, MockModel, Stream, response_body

SAMPLES = sized(int(os.environ.get("BENCH_STREAMING_SAMPLES", "5")), 1)
TOKENS_PER_S = sized(float(os.environ.get("BENCH_MODEL_TPS", "80")), 2000.0)
"""Output rate of the mock model: a small hosted model writes roughly 50-150 tokens per second."""
FIRST_TOKEN_S = sized(float(os.environ.get("BENCH_MODEL_TTFT_S", "0.5")), 0.01)
TOOL_LATENCY_MS = sized(int(os.environ.get("BENCH_TOOL_LATENCY_MS", "200")), 10)
WARMUP_ROUNDS = sized(1, 0)
CHARS_PER_TOKEN = 4
PRINCIPAL = Principal("tenant-demo", "bench", frozenset(ALL_SCOPES))


def _tokens(text: str) -> list[str]:
    return [text[index : index + CHARS_PER_TOKEN] for index in range(0, len(text), CHARS_PER_TOKEN)]


def _writing_time_s(text: str) -> float:
    return FIRST_TOKEN_S + len(_tokens(text)) / TOKENS_PER_S


def _script(model: MockModel, streamed: bool) -> None:
    plan = json.dumps(C102_PLAN)
    if streamed:
        model.answer(Stream(_tokens(plan), pace_s=1 / TOKENS_PER_S, first_token_s=FIRST_TOKEN_S))
    else:  # a whole answer also says it asks nothing (the strict schema's question); a stream cannot ask
        whole = json.dumps({**C102_PLAN, "question": None})
        model.answer(Json(response_body(whole), delay_s=_writing_time_s(plan)))
    final = json.dumps(FINAL)
    model.answer(Json(response_body(final), delay_s=_writing_time_s(final)))


async def _phases(dsn: str, run_id: str) -> dict[str, float]:
    """Seconds from ``planning_started`` to the first dispatch, to the join and to the end of the run."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT seq, data->>'kind' AS kind, recorded_at FROM run_events WHERE run_id = $1 ORDER BY seq",
            uuid.UUID(run_id),
        )
    finally:
        await connection.close()
    first: dict[str, datetime] = {}
    for row in rows:
        first.setdefault(row["kind"], row["recorded_at"])

    def since_planning(kind: str) -> float:
        return (first[kind] - first["planning_started"]).total_seconds()

    return {
        "first dispatch": since_planning("node_dispatched"),
        "plan and tools done": since_planning("join_started"),
        "run finished": since_planning("run_finished"),
    }


async def _run(supervisor: Any, dsn: str) -> dict[str, float]:
    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, planner="openai")
    )
    if submitted.outcome is not Submission.CREATED:
        raise RuntimeError(f"run not created: {submitted}")
    if not await supervisor.wait.remote(submitted.run_id, 120.0):
        raise RuntimeError(f"run {submitted.run_id} did not finish")
    phases = await _phases(dsn, submitted.run_id)
    return phases


def main() -> None:
    import ray

    with ExitStack() as stack:
        dsn = stack.enter_context(fresh_database())
        key = secrets.token_bytes(32)
        mcp_url, _ = stack.enter_context(tool_server_process(dsn, key, latency_ms=TOOL_LATENCY_MS))
        model = MockModel().start()
        stack.callback(model.stop)
        stack.enter_context(local_ray(num_cpus=8))

        def supervisor(streamed: bool) -> Any:
            openai = OpenAISettings(
                api_key="sk-bench",
                base_url=model.url,
                model="gpt-bench",
                streaming=streamed,
                answer_model="mcp_server.planner:DocumentCheckResult",  # the mock model answers a case
            )
            config = SupervisorConfig(
                dsn=dsn,
                mcp_url=mcp_url,
                token_key=key,
                limits=Budgets(),
                openai=openai,
                toolsets=shipped_toolsets(mcp_url),
            )
            name = f"raydag-bench-{'streamed' if streamed else 'whole'}"
            actor = get_or_create_supervisor(config, name=name, detached=False)
            stack.callback(ray.kill, actor)
            return actor

        arms = {"whole": supervisor(False), "streamed": supervisor(True)}
        samples: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
        for index in range(WARMUP_ROUNDS + SAMPLES):  # the first round warms up workers and connections
            for arm, actor in arms.items():
                if model.script:
                    raise RuntimeError(f"the mock model has unused answers: {len(model.script)}")
                _script(model, streamed=arm == "streamed")
                phases = asyncio.run(_run(actor, dsn))
                if index >= WARMUP_ROUNDS:
                    samples[arm].append(phases)

    plan_s = _writing_time_s(json.dumps(C102_PLAN))
    print(
        f"\n### Streamed plans (C-102, model at {TOKENS_PER_S:g} tokens/s after {FIRST_TOKEN_S:g} s; "
        f"plan written in {plan_s:.2f} s; tools {TOOL_LATENCY_MS} ms each; {SAMPLES} runs per arm)\n"
    )
    print("| seconds from planning_started to | whole plan (median) | streamed (median) | streamed / whole |")
    print("|---|---|---|---|")
    for phase in samples["whole"][0]:
        whole = statistics.median(sample[phase] for sample in samples["whole"])
        streamed = statistics.median(sample[phase] for sample in samples["streamed"])
        print(f"| {phase} | {whole:.2f} | {streamed:.2f} | {streamed / whole:.2f} |")

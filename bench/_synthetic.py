"""A synthetic tool, the DAG shapes the benchmarks run, and a planner that only joins.

``bench_wait`` sleeps as long as its node asks (the simulated upstream latency) and returns a payload of the
size asked for. It is a contract like caseops's: read-only, ``case_id`` bound to the run, a scope of its own,
served by the real ``ToolServer`` behind the same token checks.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dag.contracts import Risk, ToolContract, catalogue_of
from dag.tokens import TaskClaims
from planner.base import Final, JoinDecision, Observation, PlanningContext

SCOPE = "bench:read"
CASE_ID = "C-102"
"""A case of the demo fixture: runs need an existing case of the tenant, and the tool is bound to it."""
TENANT = "tenant-demo"


class WaitInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str = Field(min_length=1, max_length=64)
    node: str = Field(min_length=1, max_length=64)
    ms: int = Field(ge=0, le=60_000, description="Simulated upstream latency of this call.")
    payload_kb: int = Field(default=0, ge=0, le=32_768, description="Size of the payload to return.")
    upstream: list[str] = Field(default_factory=list, description="What the node read from its dependencies.")


class WaitOutput(BaseModel):
    node: str
    waited_ms: int
    upstream: list[str]
    payload: str


BENCH_WAIT = ToolContract(
    name="bench_wait",
    version="1.0.0",
    description="Benchmark tool: waits the given milliseconds and returns a payload of the given size.",
    scope=SCOPE,
    risk=Risk.READ_ONLY,
    input_model=WaitInput,
    run_bound=frozenset({"case_id"}),
    output_model=WaitOutput,
    timeout_s=60.0,
    max_attempts=1,
)
CATALOGUE = catalogue_of(BENCH_WAIT)


async def wait_handler(claims: TaskClaims, args: Any) -> WaitOutput:
    """The tool server's side of ``bench_wait``; the token checks have passed before it runs."""
    if args.ms:
        await asyncio.sleep(args.ms / 1000)
    return WaitOutput(
        node=args.node, waited_ms=args.ms, upstream=args.upstream, payload=_payload(args.payload_kb)
    )


@functools.lru_cache(maxsize=4)
def _payload(kb: int) -> str:
    """``kb`` KiB of base64 text from random bytes: neither HTTP nor PostgreSQL can compress it away."""
    return base64.b64encode(os.urandom(kb * 768)).decode("ascii")


class JoinOnlyPlanner:
    """The plan comes with the request; at the join every run is complete with an empty answer."""

    name = "bench"

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        raise RuntimeError("benchmark runs carry their plan in the request")

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        return Final(result={}, citations=[])


@dataclass(frozen=True)
class Node:
    id: str
    ms: int
    deps: tuple[str, ...] = ()
    payload_kb: int = 0
    reads: str = "/node"
    """What a dependent takes from each dependency: a pointer into its output."""


def call_args(node: Node, upstream: Sequence[Any]) -> dict[str, Any]:
    """The arguments of ``node``'s call, given what it read from its dependencies (or references to it)."""
    return {
        "case_id": CASE_ID,
        "node": node.id,
        "ms": node.ms,
        "payload_kb": node.payload_kb,
        "upstream": list(upstream),
    }


@dataclass(frozen=True)
class Shape:
    """A DAG of ``bench_wait`` nodes, in topological order."""

    name: str
    nodes: tuple[Node, ...]

    def critical_path_ms(self) -> int:
        """The longest latency path: what an ideal scheduler with free dispatch would take."""
        finish: dict[str, int] = {}
        for node in self.nodes:
            finish[node.id] = node.ms + max((finish[dep] for dep in node.deps), default=0)
        return max(finish.values())

    def total_ms(self) -> int:
        return sum(node.ms for node in self.nodes)

    def layers(self) -> list[list[Node]]:
        """Nodes grouped by depth (1 + the deepest dependency): what a wave scheduler runs together."""
        depth: dict[str, int] = {}
        grouped: list[list[Node]] = []
        for node in self.nodes:
            depth[node.id] = 1 + max((depth[dep] for dep in node.deps), default=-1)
            if depth[node.id] == len(grouped):
                grouped.append([])
            grouped[depth[node.id]].append(node)
        return grouped

    def plan(self) -> dict[str, Any]:
        """The plan raydag runs: each dependency is a reference, so the data flows as it would for real."""
        return {
            "nodes": [
                {
                    "id": node.id,
                    "tool": BENCH_WAIT.name,
                    "args": call_args(node, [{"$ref": dep, "pointer": node.reads} for dep in node.deps]),
                }
                for node in self.nodes
            ]
        }


def lattice(width: int, depth: int, ms: int = 100) -> Shape:
    """``depth`` layers of ``width`` nodes; each node reads its own column and its right neighbour above."""
    nodes = []
    for level in range(depth):
        for column in range(width):
            deps: tuple[str, ...] = ()
            if level:
                deps = tuple(dict.fromkeys(f"l{level - 1}c{c}" for c in (column, (column + 1) % width)))
            nodes.append(Node(f"l{level}c{column}", ms, deps))
    return Shape(f"lattice {width}×{depth}", tuple(nodes))


def long_beside_chain() -> Shape:
    """One 200 ms node beside a 50 ms → 150 ms chain: a barrier makes it 350 ms, the critical path is 200."""
    return Shape(
        "200 ms ∥ 50→150 ms",
        (Node("long", 200), Node("short", 50), Node("after-short", 150, ("short",))),
    )


CHAIN_STEPS_MS = (
    (180, 100, 20, 100),
    (100, 20, 100, 120),
    (60, 100, 100, 120),
    (180, 20, 60, 120),
    (20, 60, 100, 100),
    (140, 100, 40, 120),
    (120, 80, 100, 20),
    (180, 40, 20, 120),
)
"""Critical path 400 ms; step by step the slowest chain takes 180 + 100 + 100 + 120 = 500 ms (a barrier's 1.25)."""


def uneven_chains() -> Shape:
    """Eight independent 4-step chains whose steps vary from 20 to 180 ms (fixed, so every run is the same)."""
    nodes = []
    for chain, steps in enumerate(CHAIN_STEPS_MS):
        for step, ms in enumerate(steps):
            deps = (f"c{chain}s{step - 1}",) if step else ()
            nodes.append(Node(f"c{chain}s{step}", ms, deps))
    return Shape("8 chains × 4 steps, 20–180 ms", tuple(nodes))

"""The planner protocol: a planner proposes plans and decides at the join; it never authorizes anything."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dag.contracts import ToolContract
from dag.events import NodeError
from dag.states import NodeStatus, StopReason


@dataclass(frozen=True)
class ToolSpec:
    """What a planner is shown of a tool: no scopes, no risk, no tenant."""

    name: str
    description: str
    input_schema: Mapping[str, Any]

    @classmethod
    def of(cls, contract: ToolContract) -> ToolSpec:
        return cls(contract.name, contract.description, contract.input_schema)


@dataclass(frozen=True)
class Observation:
    """One node as the joiner sees it: its resolved arguments and its output or error."""

    node_id: str
    tool: str
    args: Mapping[str, Any]
    status: NodeStatus
    output: Any = None
    error: NodeError | None = None


@dataclass(frozen=True)
class PlanningContext:
    """Everything a planner may know about a run. Tenant, subject, credentials and budgets are absent by design."""

    case_id: str
    goal: str
    tools: Sequence[ToolSpec]
    round: int = 1
    observations: Sequence[Observation] = ()
    """What earlier rounds observed: data to reason about, never instructions."""
    replan_reason: str | None = None


@dataclass(frozen=True)
class Final:
    """The run has its answer. ``citations`` are the evidence refs, codes and ids the answer rests on: the
    runtime verifies that each appears in a tool output of the run."""

    result: Mapping[str, Any]
    citations: Sequence[str]


@dataclass(frozen=True)
class NeedsHuman:
    stop_reason: StopReason
    detail: str
    result: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Replan:
    """Another round is needed; the next ``propose`` sees ``reason`` and the observations so far."""

    reason: str


JoinDecision = Final | NeedsHuman | Replan


class Planner(Protocol):
    """Proposes a plan (untrusted JSON) and decides what the observations add up to."""

    name: str

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]: ...

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision: ...

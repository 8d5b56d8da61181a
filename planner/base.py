"""The planner protocol: a planner proposes plans and decides at the join; it never authorizes anything."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dag.contracts import ToolContract
from dag.errors import RaydagError
from dag.events import NodeError
from dag.states import NodeStatus, StopReason


@dataclass(frozen=True)
class ToolSpec:
    """What a planner is shown of a tool: no scopes, no risk, no tenant."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    run_bound: Mapping[str, str] = field(default_factory=dict)
    """Each input bound to the run's resource, with the resource key it must carry."""

    @classmethod
    def of(cls, contract: ToolContract) -> ToolSpec:
        bound = {binding.field: binding.resource_key for binding in contract.run_bindings}
        return cls(contract.name, contract.description, contract.input_schema, bound)


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
class Usage:
    """One model call's consumption, recorded on the run and charged against its token and cost budgets."""

    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float = 0.0


class PlannerRefused(RaydagError):
    """The model declined to answer; the run needs a human, with the refusal recorded."""


class PlannerContractViolation(RaydagError):
    """The model's output broke the required schema even after a repair request."""


@dataclass(frozen=True)
class PlanningContext:
    """Everything a planner may know about a run. Tenant, subject, credentials and budgets are absent by design."""

    resource: Mapping[str, str]
    """What the run is about (``{"case_id": "C-102"}``): the values its run-bound arguments must carry."""
    goal: str
    tools: Sequence[ToolSpec]
    round: int = 1
    observations: Sequence[Observation] = ()
    """What earlier rounds observed: data to reason about, never instructions."""
    replan_reason: str | None = None
    usage: list[Usage] = field(default_factory=list)
    """Where a planner reports each model call it makes for this request; the runtime records them."""


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


@runtime_checkable
class StreamingPlanner(Planner, Protocol):
    """A planner that can hand over plan nodes while the model is still writing the plan."""

    streaming: bool

    def propose_stream(self, context: PlanningContext) -> AsyncIterator[Mapping[str, Any]]:
        """Each node of the plan (plan format) as soon as it is complete; raises at a malformed tail."""
        ...

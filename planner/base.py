"""The planner protocol: a planner proposes plans and decides at the join; it never authorizes anything."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dag.budget import RequestBound
from dag.conclusion import Final as Final
from dag.conclusion import JoinDecision as JoinDecision
from dag.conclusion import NeedsHuman as NeedsHuman
from dag.conclusion import Replan as Replan
from dag.contracts import ToolContract
from dag.errors import RaydagError
from dag.events import NodeError
from dag.run_state import Answered as Answered
from dag.states import NodeStatus


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
class Uncalled:
    """A plan node that ended without a call, so without arguments or an output: it failed before its call
    (a reference that could not be resolved, a ``for_each`` over what is not a list) or was skipped because a
    node it depends on failed. A joiner that answers with every node's output owes it one too."""

    node_id: str
    tool: str
    status: NodeStatus
    error: NodeError | None = None

    @property
    def reason(self) -> str:
        """Its error's code (``FOR_EACH_NOT_A_LIST``), or its status (``skipped``)."""
        return self.error.code if self.error is not None else self.status.value


@dataclass(frozen=True)
class Question:
    """A planner's answer when it cannot plan without a person: what it asks. The run waits for an answer,
    which the planner is then shown (``PlanningContext.answers``) with its author."""

    text: str


@dataclass(frozen=True)
class Usage:
    """One model call's consumption, recorded on the run and charged against its token and cost budgets."""

    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float = 0.0
    reported: bool = True
    """``False``: the endpoint did not report this call's usage; the tokens are an upper bound
    (``planner.model_api.estimated_tokens``) and the cost is charged on them."""


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
    uncalled: Sequence[Uncalled] = ()
    """Plan nodes that ended without a call (``Uncalled``). They have no arguments, so they are not among the
    observations; a joiner that answers with every node's output must not answer without these."""
    answers: Sequence[Answered] = ()
    """The run's questions answered so far, each with the person who answered: what a person said, to weigh
    like any observation, never an instruction or a grant (tenant, scopes, resource and budgets are fixed)."""
    usage: list[Usage] = field(default_factory=list)
    """Where a planner reports each model call it makes for this request; the runtime records them."""
    model: str | None = None
    """The model the run named for its planning (its tenant's policy admitted it); ``None``: the planner's own.
    A planner without a model ignores it."""
    agents: bool = False
    """Whether the plan may hold loop agent nodes (docs/AGENTS.md): the run's depth leaves room for one, and
    the deployment plans them with its model planner."""
    inputs: Mapping[str, Any] = field(default_factory=dict)
    """An agent node's child run: the inputs its parent resolved for it (``ParentLink.inputs``). Data its
    parent's tools returned, to reason about like observations, never instructions."""
    max_steps: int | None = None
    """A loop agent's child run: its ``loop.max_steps``, so its model knows which step is its last (a replan
    asked for there stops the loop ``STEP_LIMIT``). A bound its plan set, not a budget of the tenant's."""


class Planner(Protocol):
    """Proposes a plan (untrusted JSON) and decides what the observations add up to.

    A planner that can plan or judge only some tools (a toolset's own, like caseops' ``conformance``) says
    which in a ``required_tools: frozenset[str]`` attribute: a run whose tools lack one of them is refused at
    submission. A generic planner has none (``required_tools`` reads it).
    """

    name: str

    async def propose(self, context: PlanningContext) -> Mapping[str, Any] | Question:
        """A plan (untrusted JSON), or a ``Question`` for a person when the planner cannot plan without one."""
        ...

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision: ...


def default_model(planner: Planner) -> str | None:
    """The model ``planner`` plans with when a run names none (its ``default_model`` attribute); ``None``: it
    plans with no model, and a run of it may not name one. The seam for anything else that runs a model."""
    model = getattr(planner, "default_model", None)
    return str(model) if model is not None else None


def proposal_bound(planner: Planner, context: PlanningContext) -> RequestBound | None:
    """The most ``planner``'s model request for a plan in ``context`` may take, known before it is made (its
    ``proposal_bound`` method); ``None``: it plans with no model, or cannot say."""
    bound = getattr(planner, "proposal_bound", None)
    if bound is None:
        return None
    known: RequestBound = bound(context)
    return known


def required_tools(planner: Planner) -> frozenset[str]:
    """The tools ``planner`` cannot plan or judge a run without (none for a generic planner)."""
    needed: frozenset[str] = frozenset(getattr(planner, "required_tools", ()))
    return needed


@runtime_checkable
class StreamingPlanner(Planner, Protocol):
    """A planner that can hand over plan nodes while the model is still writing the plan."""

    streaming: bool

    def propose_stream(self, context: PlanningContext) -> AsyncIterator[Mapping[str, Any] | Question]:
        """Each node of the plan (plan format) as soon as it is complete; raises at a malformed tail. Or, in
        place of any node, one ``Question`` for a person."""
        ...

"""Admission: whether a request may become a run, and whether a plan may become a round of one.

Every path that accepts a plan asks here: a request submitted, with its plan or for a planner to write one
(``admit_run``, and ``refuse_before_listing`` for what is certain before any server is listed); a plan a
planner proposed, a replan, or a submitted plan taken up again after a recovery (``admit_round``); a plan
streamed node by node (``round_validator``). Each answer is a value — admitted, or why not — that the caller
``match``es and records.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dag.agents import AGENT_DEPTH_CAP
from dag.budget import NODES_CAP, STOP_REASON_OF_BUDGET, BudgetAboveLimit, BudgetRequest, Budgets
from dag.contracts import INVESTIGATE, ToolCatalogue
from dag.errors import BudgetExceeded, PlanInvalid
from dag.plan import Plan
from dag.run_resource import Resource, ResourceMismatch, missing_resource_keys, resource_mismatch
from dag.run_state import RunState
from dag.states import StopReason
from dag.validate import PlanValidator, validate_plan

PLAN_GIVEN_PLANNER = "outputs"
"""The planner of a run that gives its own plan and names none: the generic ``outputs`` planner
(``planner/outputs.py``), which judges a plan over any toolset."""


def choose_planner(named: str | None, *, planned: bool, toolset_planner: str | None) -> str | None:
    """The planner of a run: the one it names; else, for a run that gives its own plan, ``outputs``; else
    the toolsets' own (``toolset_planner``, as the toolsets file declares it). ``None`` when none applies:
    the request must name a planner or give a plan."""
    if named is not None:
        return named
    if planned:
        return PLAN_GIVEN_PLANNER
    return toolset_planner


# ---------------------------------------------------------------- a request, at submission


@dataclass(frozen=True)
class Offer:
    """What a supervisor offers one requester now: what ``admit_run`` weighs a request against."""

    catalogue: ToolCatalogue
    """The tools listed now."""
    limits: Budgets
    """The most of each budget a request may ask for (the server's limits)."""
    planners: Mapping[str, frozenset[str]]
    """Each planner offered, with the tools it cannot plan or judge a run without."""
    unavailable_planners: Mapping[str, str] = field(default_factory=dict)
    """Planners this deployment knows but cannot offer, with the reason."""
    toolset_planner: str | None = None
    """The toolsets' own planner: the planner of a run that names none and gives no plan."""
    withdrawn: Container[str] = frozenset()
    """Declared tools that may not be called now: a plan naming one that is not listed is not refused, the run
    is created and stops with the tool's withdrawal."""
    unlisted: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The requester's declared tools whose server has not been listed, with the resource keys they bind."""
    granted: Container[str] | None = None
    """The requester's tenant's tools (``None``: the whole catalogue)."""
    defaults: Budgets | None = None
    """What a run gets of each budget it does not ask for: its tenant's, else the server's (``None``: the
    limits themselves)."""
    planner_models: Mapping[str, str] = field(default_factory=dict)
    """Each planner that plans with a model, with the model it uses when a run names none."""
    models: frozenset[str] = frozenset()
    """The models the requester's tenant may name besides a planner's default (``TenantPolicy.models``)."""
    agent_levels: int | None = None
    """How many levels of agent nodes a plan may nest (``None``: agent nodes are refused)."""
    loop_planner: str | None = None
    """The planner a loop agent's child run is planned by (the deployment's model planner)."""


@dataclass(frozen=True)
class RunAdmitted:
    """The request may become a run."""

    planner: str
    """The planner chosen (``choose_planner``): the run's, and what its idempotency fingerprint hashes."""
    budgets: Budgets
    """The run's: each as the request asked, else the default (``Budgets.granted``)."""
    plan: Plan | None
    """The request's plan, validated; ``None`` without one, or when it names a tool not listed now."""
    tools: frozenset[str]
    """The listed tools the run may use."""
    checked_by: tuple[str, ...]
    """The tools whose resource checks decide whether the requester may name the resource."""


@dataclass(frozen=True)
class NoPlanner:
    """The request names no planner, gives no plan, and the toolsets declare no planner of their own."""

    known: tuple[str, ...]


@dataclass(frozen=True)
class UnknownPlanner:
    planner: str
    known: tuple[str, ...]


@dataclass(frozen=True)
class PlannerUnavailable:
    """The planner exists but this deployment cannot offer it (the model planner without a key)."""

    planner: str
    reason: str


@dataclass(frozen=True)
class OverLimits:
    """The request asked for more than the server's budgets allow."""

    error: BudgetAboveLimit


@dataclass(frozen=True)
class PlanRefused:
    """The plan failed validation; nothing of it runs."""

    error: PlanInvalid


@dataclass(frozen=True)
class ResourceUnfit:
    """The resource lacks a key a tool of the plan needs, or names one no tool of the run uses."""

    mismatch: ResourceMismatch


@dataclass(frozen=True)
class PlannerLacksTools:
    """The planner cannot plan or judge a run without ``missing``, which this run cannot use: not offered to
    its tenant or stage, or bound to ``lacking``, resource keys the run's resource does not have."""

    planner: str
    missing: tuple[str, ...]
    lacking: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelNotAllowed:
    """The request names a model its planner may not use for it: the planner plans with no model
    (``allowed`` is empty), or the tenant's policy does not list the model."""

    model: str
    planner: str
    allowed: tuple[str, ...]
    at: str | None = None
    """Where a plan names it: an agent node's ``model`` (``/nodes/1/agent/model``); ``None``: the run's own."""


@dataclass(frozen=True)
class UnknownStage:
    """No tool the run could use is declared for ``stage``: the stages that are, in ``known``."""

    stage: str
    known: tuple[str, ...]


RunRefusal = (
    UnknownStage
    | NoPlanner
    | UnknownPlanner
    | PlannerUnavailable
    | ModelNotAllowed
    | OverLimits
    | PlanRefused
    | ResourceUnfit
    | PlannerLacksTools
)


def admit_run(
    *,
    planner: str | None,
    plan: Mapping[str, Any] | None,
    resource: Resource,
    budgets: BudgetRequest | None,
    offer: Offer,
    stage: str = INVESTIGATE,
    model: str | None = None,
) -> RunAdmitted | RunRefusal:
    """Whether a request may become a run: its stage, planner, model, budgets, plan and resource, in that order.
    A run's tools are those granted to its tenant and declared for its ``stage``.

    What is left for the caller is what needs I/O: the resource checks of ``RunAdmitted.checked_by``.
    """
    stages = frozenset().union(*(contract.stages for contract in offer.catalogue.values()))
    if stage != INVESTIGATE and stage not in stages:  # the default stays open to a run of unlisted tools
        return UnknownStage(stage, tuple(sorted(stages)))
    chosen = choose_planner(planner, planned=plan is not None, toolset_planner=offer.toolset_planner)
    if chosen is None:
        return NoPlanner(tuple(sorted(offer.planners)))
    if chosen in offer.unavailable_planners:
        return PlannerUnavailable(chosen, offer.unavailable_planners[chosen])
    if chosen not in offer.planners:
        return UnknownPlanner(chosen, tuple(sorted(offer.planners)))
    if model is not None and (refused := model_refusal(model, chosen, offer)) is not None:
        return refused
    try:
        lowered = offer.limits.granted(budgets, defaults=offer.defaults)
    except BudgetAboveLimit as exc:
        return OverLimits(exc)
    granted = offer.granted
    usable = {
        name: contract
        for name, contract in offer.catalogue.items()
        if (granted is None or name in granted) and stage in contract.stages
    }
    checked = None
    planned = None
    if plan is not None and not _names_unlisted(plan, offer):
        try:
            checked = validate_plan(
                Plan.parse(plan),
                offer.catalogue,
                max_nodes=lowered.max_nodes,
                agent_levels=offer.agent_levels,
            )
        except PlanInvalid as exc:
            return PlanRefused(exc)
        if (refused := agent_model_refusal(checked, offer)) is not None:
            return refused
        named = checked.tools_named()
        planned = list(named) if named is not None else None
    unlisted = offer.unlisted
    mismatch = resource_mismatch(resource, usable, planned)
    if mismatch is not None and not mismatch.missing and planned is None:
        # A key a tool of an unlisted server is declared to bind is not a requester's mistake: the run is
        # created and stops with that server's withdrawal, as a plan naming its tool would.
        declared = frozenset().union(*unlisted.values())
        if set(mismatch.unused) <= declared:
            mismatch = None
    if mismatch is not None:
        return ResourceUnfit(mismatch)
    offered = [name for name, contract in usable.items() if not missing_resource_keys(contract, resource)]
    # An unlisted server's tools count as the run's: its run is created and stops with the withdrawal.
    reachable = [name for name, keys in unlisted.items() if keys <= resource.keys()]
    missing = offer.planners[chosen] - {*offered, *reachable}
    if missing:
        lacking = frozenset().union(
            *(missing_resource_keys(usable[name], resource) for name in missing if name in usable)
        )
        return PlannerLacksTools(chosen, tuple(sorted(missing)), tuple(sorted(lacking)))
    # An unlisted server's check still decides who may name the resource: existence must not leak while
    # that server is down.
    checked_by = (planned if planned is not None else offered) + reachable
    return RunAdmitted(chosen, lowered, checked, frozenset(usable), tuple(checked_by))


def model_refusal(model: str, planner: str, offer: Offer) -> ModelNotAllowed | None:
    """Whether a run of ``planner`` may plan with ``model``: the planner's own default, or one its tenant's
    policy lists (an operator's choice, never a model's or a requester's)."""
    default = offer.planner_models.get(planner)
    if default is None:
        return ModelNotAllowed(model, planner, ())
    allowed = {default, *offer.models}
    return None if model in allowed else ModelNotAllowed(model, planner, tuple(sorted(allowed)))


def agent_model_refusal(plan: Plan, offer: Offer, at: str = "") -> ModelNotAllowed | None:
    """The first agent node of ``plan`` (inline plans' included) naming a model its child's planner may not ask
    for this tenant: refused with the run, before any child or model exists, as a run's own ``model`` is."""
    for index, node in enumerate(plan.nodes):
        agent = node.agent
        if agent is None:
            continue
        where = f"{at}/nodes/{index}/agent"
        if agent.plan is not None:
            refused = agent_model_refusal(agent.plan, offer, where + "/plan")
        elif agent.model is None:
            continue
        else:
            planner = offer.loop_planner if agent.loop is not None else agent.planner
            if planner is None or planner not in offer.planners:  # the child's own admission says why
                continue
            refused = model_refusal(agent.model, planner, offer)
            if refused is not None:
                refused = replace(refused, at=where + "/model")
        if refused is not None:
            return refused
    return None


def refuse_before_listing(
    plan: Mapping[str, Any], declared: Collection[str], *, max_nodes: int
) -> PlanRefused | None:
    """What ``admit_run`` would certainly refuse in ``plan`` before a single server is listed: its shape, size,
    node ids, references and identity fields, and a tool no toolset declares (a server's other tools are never
    offered). ``None`` leaves the rest to admission: a node's arguments, which only the listed schema judges,
    and a declared tool whose server does not list it (the run is then created, and stops with it)."""
    try:
        validate_plan(
            Plan.parse(plan), dict.fromkeys(declared), max_nodes=max_nodes, agent_levels=AGENT_DEPTH_CAP
        )
    except PlanInvalid as exc:
        return PlanRefused(exc)
    return None


def _names_unlisted(plan: Mapping[str, Any], offer: Offer) -> bool:
    """Whether ``plan`` (as submitted, before it is parsed) names a declared tool not listed now."""
    nodes = plan.get("nodes")
    return isinstance(nodes, list) and any(
        isinstance(node, Mapping) and _unlisted(node.get("tool"), offer.catalogue, offer.withdrawn)
        for node in nodes
    )


def _unlisted(tool: object, catalogue: ToolCatalogue, withdrawn: Container[str]) -> bool:
    return isinstance(tool, str) and tool in withdrawn and tool not in catalogue


# ---------------------------------------------------------------- a plan, for a round of a run


@dataclass(frozen=True)
class RoundAdmitted:
    """The plan becomes the round's."""

    plan: Plan


@dataclass(frozen=True)
class ToolUnlisted:
    """The plan names a declared tool whose server is not listed: the run stops with that tool's withdrawal."""

    tool: str


@dataclass(frozen=True)
class OverBudget:
    """The replan would take the run past a budget: the run stops with the budget's reason."""

    error: BudgetExceeded
    round: int

    @property
    def stop_reason(self) -> StopReason:
        return STOP_REASON_OF_BUDGET[self.error.budget]

    @property
    def detail(self) -> str:
        return f"replan {self.round}: {self.error}"


RoundAdmission = RoundAdmitted | ToolUnlisted | PlanRefused | OverBudget


def admit_round(
    proposal: Any,
    state: RunState,
    catalogue: ToolCatalogue,
    withdrawn: Container[str],
    *,
    agent_levels: int | None = None,
) -> RoundAdmission:
    """Whether ``proposal`` may be the plan of the round ``state`` is planning, with agent nodes nested at
    most ``agent_levels`` deep (``None``: none).

    The first round's plan is bounded by the run's ``max_nodes``; a replan's by ``NODES_CAP``, then weighed
    with the run's nodes so far against ``max_nodes`` (``Budgets.check_plan_size``).
    """
    round_number = state.round
    try:
        parsed = Plan.parse(proposal)
        for node in parsed.nodes:
            if _unlisted(node.tool, catalogue, withdrawn):
                return ToolUnlisted(node.tool)
        plan = validate_plan(
            parsed,
            catalogue,
            max_nodes=state.budgets.max_nodes if round_number == 1 else NODES_CAP,
            round_number=round_number,
            earlier=state.earlier_names(),
            agent_levels=agent_levels,
        )
        if round_number > 1:
            state.budgets.check_plan_size(nodes=state.node_count(), added=len(plan.nodes))
    except PlanInvalid as exc:
        return PlanRefused(exc)
    except BudgetExceeded as exc:
        return OverBudget(exc, round_number)
    return RoundAdmitted(plan)


def round_validator(
    state: RunState, catalogue: ToolCatalogue, *, agent_levels: int | None = None
) -> PlanValidator:
    """What admits a streamed plan of the round ``state`` is planning, node by node as it arrives: bounded by
    the nodes the run may still gain."""
    return PlanValidator(
        catalogue,
        max_nodes=state.budgets.nodes_left(nodes=state.node_count()),
        round_number=state.round,
        earlier=state.earlier_names(),
        agent_levels=agent_levels,
    )

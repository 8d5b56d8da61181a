"""The policy engine: who may run which tool, on what, decided on resolved arguments.

Decisions are values. The same rules that decide a dispatch also decide which tools a planner is shown,
so a planner never sees a tool the run could not use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE, Risk, ToolCatalogue, ToolContract
from dag.run_resource import Resource, missing_resource_keys

RESOURCE_KEY_MISSING = "resource.key_missing"


@dataclass(frozen=True)
class Principal:
    """Who a run acts for. It comes from authentication, never from a plan or a model."""

    tenant_id: str
    subject: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class RunAuthority:
    """Everything the policy weighs that is not in the node: who, on which resource, which stage, which tools."""

    principal: Principal
    resource: Resource
    stage: str = INVESTIGATE
    tenant_tools: frozenset[str] | None = None
    """The tenant's tool catalogue; ``None`` grants the whole catalogue."""


@dataclass(frozen=True)
class TenantPolicy:
    """What a tenant's operator decided about its own people (``RAYDAG_TENANT_POLICY``); never from a plan or a
    model. The default is the strictest: nobody decides the operations of a run they asked for."""

    self_approval: frozenset[Risk] = frozenset()
    """The write risks whose operations the run's own principal may approve or reject."""
    plan_review: bool = False
    """Every run of the tenant waits for a person to approve its plan before anything of it runs."""
    self_review: bool = False
    """The run's own principal may approve or reject its run's plan."""
    budgets: BudgetRequest | None = None
    """What the tenant's runs get of each budget they do not ask for, in place of the server's defaults (each
    within the server's limits); ``None``: the server's."""
    models: frozenset[str] = frozenset()
    """The models the tenant's runs may name for their planning, besides the model planner's own default."""


def policy_of(policies: Iterable[tuple[str, TenantPolicy]], tenant_id: str) -> TenantPolicy:
    """``tenant_id``'s policy among ``policies``; a tenant not named gets the strictest."""
    return dict(policies).get(tenant_id, TenantPolicy())


class Decision(BaseModel):
    """The policy's answer for one node: a value recorded with the node, never an exception."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed: bool
    rule_id: str
    reason: str


ALLOWED = Decision(allowed=True, rule_id="allow.read_only_in_scope", reason="read-only tool, scope held")
ALLOWED_WRITE = Decision(
    allowed=True,
    rule_id="allow.write_as_operation",
    reason="write tool with an operation declared, scope held: it acts only once its operation is approved",
)


def _deny(rule_id: str, reason: str) -> Decision:
    return Decision(allowed=False, rule_id=rule_id, reason=reason)


def tool_decision(authority: RunAuthority, catalogue: ToolCatalogue, tool: str) -> Decision:
    """Whether the run may use ``tool`` at all, before looking at arguments."""
    contract = catalogue.get(tool)
    if contract is None:
        return _deny("tool.not_in_catalogue", f"tool {tool[:80]!r} is not available")
    if authority.tenant_tools is not None and tool not in authority.tenant_tools:
        return _deny("tenant.tool_not_granted", f"tool {tool!r} is not in this tenant's catalogue")
    if contract.risk is not Risk.READ_ONLY and contract.operation is None:
        return _deny(
            "risk.read_only_only",
            f"tool {tool!r} has risk {contract.risk.value} and no operation declared; "
            "a write runs only as an operation of the ledger",
        )
    if authority.stage not in contract.stages:
        return _deny("stage.not_allowed", f"tool {tool!r} is not used in stage {authority.stage!r}")
    if contract.scope not in authority.principal.scopes:
        return _deny(
            "scope.missing", f"tool {tool!r} needs scope {contract.scope!r}, which the run does not hold"
        )
    missing = missing_resource_keys(contract, authority.resource)
    if missing:  # fail closed: a binding the policy cannot check is not waved through
        return _deny(
            RESOURCE_KEY_MISSING,
            f"tool {tool!r} binds its input to the run's {', '.join(map(repr, missing))}, "
            "which the run's resource does not name",
        )
    return ALLOWED if contract.risk is Risk.READ_ONLY else ALLOWED_WRITE


def effective_tools(authority: RunAuthority, catalogue: ToolCatalogue) -> dict[str, ToolContract]:
    """The tools a planner may see: tenant catalogue ∩ scopes ∩ stage ∩ risk policy.

    A tool's health is no part of it: an unwell tool makes calls wait (``dag.health``), it does not change
    what a run may do or what its planner is told."""
    return {
        name: contract
        for name, contract in catalogue.items()
        if tool_decision(authority, catalogue, name).allowed
    }


def authorize(
    authority: RunAuthority,
    catalogue: ToolCatalogue,
    tool: str,
    args: Mapping[str, Any],
    observed: Mapping[str, frozenset[str]],
) -> Decision:
    """Decide whether ``tool`` may run with the resolved ``args`` inside this run.

    ``observed`` maps each observed-bound field to the values this run has seen in its tool outputs.
    """
    decision = tool_decision(authority, catalogue, tool)
    if not decision.allowed:
        return decision
    contract = catalogue[tool]
    for binding in contract.run_bindings:
        key = binding.resource_key
        refusal = binding.refusal(args.get(binding.field), authority.resource[key])
        if refusal is not None:
            return _deny(f"resource.{key.removesuffix('_id')}_bound", f"the node's {binding.field} {refusal}")
    for name in sorted(contract.observed_bound):
        if args.get(name) not in observed.get(name, frozenset()):
            return _deny(
                "resource.not_observed",
                f"the node's {name} is not one this run has seen in a tool output",
            )
    return ALLOWED if contract.risk is Risk.READ_ONLY else ALLOWED_WRITE


def observed_values(outputs: Iterable[Any], names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Every string found under each key of ``names`` anywhere in ``outputs``."""
    wanted = frozenset(names)
    found: dict[str, set[str]] = {name: set() for name in wanted}

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, child in value.items():
                if key in wanted and isinstance(child, str):
                    found[key].add(child)
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    for output in outputs:
        walk(output)
    return {name: frozenset(values) for name, values in found.items()}

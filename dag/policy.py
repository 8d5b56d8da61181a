"""The policy engine: who may run which tool, on what, decided on resolved arguments."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

from dag.contracts import Risk, ToolCatalogue


@dataclass(frozen=True)
class Principal:
    """Who a run acts for. It comes from authentication, never from a plan or a model."""

    tenant_id: str
    subject: str
    scopes: frozenset[str]


class Decision(BaseModel):
    """The policy's answer for one node: a value recorded with the node, never an exception."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed: bool
    rule_id: str
    reason: str


def authorize(
    *,
    principal: Principal,
    run_case_id: str,
    catalogue: ToolCatalogue,
    tool: str,
    args: Mapping[str, Any],
) -> Decision:
    """Decide whether ``tool`` may run with the resolved ``args`` inside this run."""
    contract = catalogue.get(tool)
    if contract is None:
        return Decision(
            allowed=False, rule_id="tool.not_in_catalogue", reason=f"tool {tool!r} is not available"
        )
    if contract.risk is not Risk.READ_ONLY:
        return Decision(
            allowed=False,
            rule_id="risk.read_only_only",
            reason=f"tool {tool!r} has risk {contract.risk.value}; runs may only call read-only tools",
        )
    if contract.scope not in principal.scopes:
        return Decision(
            allowed=False,
            rule_id="scope.missing",
            reason=f"tool {tool!r} needs scope {contract.scope!r}, which the run does not hold",
        )
    bindings = {"case_id": run_case_id}
    for field in sorted(contract.run_bound):
        if field not in bindings:  # fail closed: a binding the policy cannot check is not allowed through
            return Decision(
                allowed=False,
                rule_id="resource.unknown_binding",
                reason=f"tool {tool!r} binds {field!r} to the run, which this policy cannot check",
            )
        if args.get(field) != bindings[field]:
            return Decision(
                allowed=False,
                rule_id=f"resource.{field.removesuffix('_id')}_bound",
                reason=f"the node's {field} is not the run's",
            )
    return Decision(allowed=True, rule_id="allow.read_only_in_scope", reason="read-only tool, scope held")

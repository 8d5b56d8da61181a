"""raydag's pure core: plans, references, validation, fingerprints, states, events, scheduling, policy, budgets,
and the decisions of a run made of them: admission, dispatch and the join's conclusion.

Nothing here performs I/O or imports Ray, a database driver, an HTTP stack or MCP.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dag.budget import Budgets
    from dag.contracts import Risk, ToolCatalogue, ToolContract, catalogue_of
    from dag.errors import (
        BudgetExceeded,
        IllegalTransition,
        PlanErrorCode,
        PlanInvalid,
        RaydagError,
        ReferenceUnresolved,
    )
    from dag.fingerprint import action_fingerprint, canonical_json, sha256_hex
    from dag.plan import Plan, PlanNode
    from dag.policy import Decision, Principal, authorize
    from dag.run_state import NodeState, RunState, apply, fold
    from dag.states import NodeStatus, RunStatus, StopReason
    from dag.validate import check_arguments, validate_plan

__all__ = [
    "BudgetExceeded",
    "Budgets",
    "Decision",
    "IllegalTransition",
    "NodeState",
    "NodeStatus",
    "Plan",
    "PlanErrorCode",
    "PlanInvalid",
    "PlanNode",
    "Principal",
    "RaydagError",
    "ReferenceUnresolved",
    "Risk",
    "RunState",
    "RunStatus",
    "StopReason",
    "ToolCatalogue",
    "ToolContract",
    "action_fingerprint",
    "apply",
    "authorize",
    "canonical_json",
    "catalogue_of",
    "check_arguments",
    "fold",
    "sha256_hex",
    "validate_plan",
]

_HOMES = {
    "Budgets": "dag.budget",
    "Risk": "dag.contracts",
    "ToolCatalogue": "dag.contracts",
    "ToolContract": "dag.contracts",
    "catalogue_of": "dag.contracts",
    "BudgetExceeded": "dag.errors",
    "IllegalTransition": "dag.errors",
    "PlanErrorCode": "dag.errors",
    "PlanInvalid": "dag.errors",
    "RaydagError": "dag.errors",
    "ReferenceUnresolved": "dag.errors",
    "action_fingerprint": "dag.fingerprint",
    "canonical_json": "dag.fingerprint",
    "sha256_hex": "dag.fingerprint",
    "Plan": "dag.plan",
    "PlanNode": "dag.plan",
    "Decision": "dag.policy",
    "Principal": "dag.policy",
    "authorize": "dag.policy",
    "NodeState": "dag.run_state",
    "RunState": "dag.run_state",
    "apply": "dag.run_state",
    "fold": "dag.run_state",
    "NodeStatus": "dag.states",
    "RunStatus": "dag.states",
    "StopReason": "dag.states",
    "check_arguments": "dag.validate",
    "validate_plan": "dag.validate",
}
"""Where each name of ``__all__`` lives: imported on first use, so that importing one module of the core (the
CLI's ``dag.states``) does not import all of it."""


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dag' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value

"""raydag's pure core: plans, references, validation, fingerprints, states, events, scheduling, policy, budgets,
and the decisions of a run made of them: admission, dispatch and the join's conclusion.

Nothing here performs I/O or imports Ray, a database driver, an HTTP stack or MCP.
"""

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

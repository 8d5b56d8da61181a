"""What a request for a run is, and what submitting one, cancelling one or draining a supervisor answers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dag.budget import BudgetRequest
from dag.fingerprint import sha256_hex
from dag.policy import Principal

DEFAULT_GOAL = "Answer from what the run's tools return."
"""A request's goal when it names none: the plan-driven planners ignore it; a model planner is best given one."""


@dataclass(frozen=True)
class RunRequest:
    """A request for a run over ``resource``. ``principal`` comes from authentication, the rest from the caller."""

    principal: Principal
    resource: Mapping[str, str]
    goal: str = DEFAULT_GOAL
    planner: str = "conformance"
    plan: Mapping[str, Any] | None = None
    budgets: BudgetRequest | None = None
    idempotency_key: str | None = None
    trace: Mapping[str, str] | None = None
    """The caller's W3C trace context; not part of what makes two requests the same."""

    def fingerprint(self) -> str:
        """What makes two requests "the same" for an idempotency key: the body and who sent it."""
        return sha256_hex(
            {
                "subject": self.principal.subject,
                "scopes": sorted(self.principal.scopes),
                # A caseops run hashes as it did before runs named a resource: a retried request still matches.
                **(
                    {"case_id": self.resource["case_id"]}
                    if set(self.resource) == {"case_id"}
                    else {"resource": dict(self.resource)}
                ),
                "goal": self.goal,
                "planner": self.planner,
                "plan": self.plan,
                "budgets": self.budgets.model_dump(exclude_none=True) if self.budgets else None,
            }
        )


class Submission(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    RESOURCE_NOT_FOUND = "resource_not_found"
    """A toolset's resource check refused the resource: unknown, or not the principal's (one answer)."""
    RESOURCE_CHECK_UNAVAILABLE = "resource_check_unavailable"
    RESOURCE_MISMATCH = "resource_mismatch"
    """The resource lacks a key a tool of the plan needs, or names one no tool of the run uses."""
    UNKNOWN_PLANNER = "unknown_planner"
    PLAN_INVALID = "plan_invalid"
    BUDGET_ABOVE_LIMIT = "budget_above_limit"
    PLANNER_UNAVAILABLE = "planner_unavailable"
    """The planner exists but this deployment cannot offer it (the model planner without a key)."""
    UNAVAILABLE = "unavailable"
    """PostgreSQL cannot be reached: nothing was accepted, the client should retry later."""
    SHUTTING_DOWN = "shutting_down"
    """The supervisor is handing its runs over before it stops: nothing was accepted, retry later."""


@dataclass(frozen=True)
class SubmitResult:
    outcome: Submission
    run_id: str | None = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Drained:
    """What a supervisor handed over when it stopped."""

    handed_over: tuple[str, ...]
    """Runs left live for another supervisor to resume."""
    abandoned: tuple[str, ...] = ()
    """Those of them whose calls were still in flight when the grace period ended."""


class Cancellation(StrEnum):
    CANCELLED = "cancelled"
    ALREADY_FINISHED = "already_finished"
    NOT_FOUND = "not_found"
    NOT_OWNED = "not_owned"
    """The run is live but driven by no process here (its supervisor died); recovery owns it."""

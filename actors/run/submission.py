"""What a request for a run is, and what submitting one, cancelling one or draining a supervisor answers.

A refusal is shown the same way on every surface: ``SubmitResult.refusal()`` gives it its problem type, HTTP
status and message once; the API, the CLI and the Python API render that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, assert_never

from dag.admission import (
    ModelNotAllowed,
    NoPlanner,
    OverLimits,
    PlannerLacksTools,
    PlannerUnavailable,
    PlanRefused,
    ResourceUnfit,
    RunRefusal,
    UnknownPlanner,
    UnknownStage,
)
from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE
from dag.fingerprint import sha256_hex
from dag.policy import Principal

DEFAULT_GOAL = "Answer from what the run's tools return."
"""A request's goal when it names none: the plan-driven planners ignore it; a model planner is best given one."""


MAX_ACTIVE_RUNS = 64
"""Runs a supervisor drives at once (``RAYDAG_MAX_ACTIVE_RUNS``); more are accepted and wait their turn."""


@dataclass(frozen=True)
class RunRequest:
    """A request for a run over ``resource``. ``principal`` comes from authentication, the rest from the caller."""

    principal: Principal
    resource: Mapping[str, str]
    goal: str = DEFAULT_GOAL
    planner: str | None = None
    """The planner named; ``None``: chosen at submission (``dag.admission.choose_planner``)."""
    plan: Mapping[str, Any] | None = None
    budgets: BudgetRequest | None = None
    idempotency_key: str | None = None
    trace: Mapping[str, str] | None = None
    """The caller's W3C trace context; not part of what makes two requests the same."""
    stage: str = INVESTIGATE
    """The run's stage: which of the toolsets' tools it may use (writes are declared for a stage that acts)."""
    review: bool = False
    """Each round's plan waits for a person's yes before anything of it runs (a tenant's policy may require it)."""
    model: str | None = None
    """The model the run's planner plans with; ``None``: the planner's own. Its tenant's policy must allow it
    (``dag.admission.model_refusal``)."""

    def fingerprint(self) -> str:
        """What makes two requests "the same" for an idempotency key: the body and who sent it. The service
        hashes the request with its planner resolved, so that naming the planner a request would get anyway
        changes nothing (a retried caseops request hashes as it did when ``conformance`` was the default)."""
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
                # A run of the default stage hashes as it did before runs had a stage.
                **({"stage": self.stage} if self.stage != INVESTIGATE else {}),
                **({"review": True} if self.review else {}),
                **({"model": self.model} if self.model is not None else {}),
            }
        )


@dataclass(frozen=True)
class ContinueRequest:
    """A request to continue ``run_id``, which stopped (``dag.continuation``). ``principal`` (who continues)
    comes from authentication and must be able to read the run; the continuation runs as the earlier run's
    principal, over its resource. Only the goal, an answer and the budgets may be new."""

    principal: Principal
    run_id: str
    goal: str | None = None
    """``None``: the earlier run's."""
    answer: str | None = None
    """What the planner is told, as a person's answer to what the earlier run stopped on."""
    budgets: BudgetRequest | None = None
    """Applied over the earlier run's, each within the server's limit: a stopped run may get more room."""
    trace: Mapping[str, str] | None = None

    def fingerprint(self) -> str:
        """What makes two requests to continue a run "the same": the same one replays the continuation."""
        return sha256_hex(
            {
                "continues": self.run_id,
                "subject": self.principal.subject,
                "goal": self.goal,
                "answer": self.answer,
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
    NO_PLANNER = "no_planner"
    """The request names no planner and gives no plan, and the toolsets declare no planner of their own."""
    UNKNOWN_STAGE = "unknown_stage"
    """No tool is declared for the stage the request names."""
    PLANNER_LACKS_TOOLS = "planner_lacks_tools"
    """The planner cannot plan or judge a run without tools this run cannot use (caseops' ``conformance``
    over another toolset)."""
    PLAN_INVALID = "plan_invalid"
    BUDGET_ABOVE_LIMIT = "budget_above_limit"
    PLANNER_UNAVAILABLE = "planner_unavailable"
    """The planner exists but this deployment cannot offer it (the model planner without a key)."""
    MODEL_NOT_ALLOWED = "model_not_allowed"
    """The request names a model its planner does not plan with, or its tenant's policy does not allow."""
    UNAVAILABLE = "unavailable"
    """PostgreSQL cannot be reached: nothing was accepted, the client should retry later."""
    SHUTTING_DOWN = "shutting_down"
    """The supervisor is handing its runs over before it stops: nothing was accepted, retry later."""
    RUN_NOT_FOUND = "run_not_found"
    """The run to continue is unknown, another tenant's, or beyond the requester's scopes (one answer)."""
    RUN_NOT_FINISHED = "run_not_finished"
    RUN_NOT_CONTINUABLE = "run_not_continuable"
    """The run completed, failed or was cancelled: nothing a person or time clears ended it."""
    HISTORY_PRUNED = "history_pruned"
    """Retention removed the run's events: what succeeded in it is no longer known."""
    ALREADY_CONTINUED = "already_continued"
    """The run was continued already, by another request: its continuation is ``run_id``."""


DATABASE_RETRY_AFTER_S = 5
SUPERVISOR_RETRY_AFTER_S = 1
"""Ray restarts a supervisor whose process died within a second or two."""


@dataclass(frozen=True)
class Refusal:
    """Why a submission started no run, as every surface shows it: an HTTP problem (``status``, the problem
    type ``problem``, ``detail`` and extension ``fields``, ``retry_after_s`` for a 503), the CLI's message and
    exit code, the Python API's error."""

    status: int
    problem: str
    detail: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    retry_after_s: int | None = None

    @property
    def requester_must_act(self) -> bool:
        """Whether the request must change (a 4xx); otherwise the same request may be retried later."""
        return self.status < 500


@dataclass(frozen=True)
class SubmitResult:
    outcome: Submission
    run_id: str | None = None
    error: dict[str, Any] | None = None

    def refusal(self) -> Refusal | None:
        """Why no run was started; ``None`` for a created or replayed run."""
        error = dict(self.error or {})
        match self.outcome:
            case Submission.CREATED | Submission.REPLAYED:
                return None
            case Submission.RESOURCE_NOT_FOUND:
                # The toolset's check makes one answer for an unknown resource and another tenant's (caseops:
                # 404 case-not-found, byte for byte the same).
                return Refusal(404, str(error.get("problem")), str(error.get("detail")))
            case Submission.RESOURCE_CHECK_UNAVAILABLE:
                detail = "the resource check could not answer; nothing was accepted, retry later"
                return Refusal(
                    503, "resource-check-unavailable", detail, retry_after_s=SUPERVISOR_RETRY_AFTER_S
                )
            case Submission.IDEMPOTENCY_CONFLICT:
                detail = "this Idempotency-Key was already used with a different request"
                return Refusal(409, "idempotency-key-reused", detail, {"run_id": self.run_id})
            case Submission.RESOURCE_MISMATCH:
                detail = str(error.pop("message", "the resource does not fit the run's tools"))
                return Refusal(422, "resource-mismatch", detail, error)
            case Submission.PLAN_INVALID:
                return Refusal(422, "plan-invalid", str(error["message"]), {"plan_error": error})
            case Submission.UNKNOWN_PLANNER:
                return Refusal(422, "unknown-planner", "the planner is not available", error)
            case Submission.NO_PLANNER:
                detail = (
                    "no planner: name one (planner in the request, --planner on the command line; openai needs "
                    "OPENAI_API_KEY), or give a plan"
                )
                return Refusal(422, "unknown-planner", detail, error)
            case Submission.PLANNER_UNAVAILABLE:
                return Refusal(
                    422, "planner-unavailable", str(error.get("reason")), {"planner": error.get("planner")}
                )
            case Submission.MODEL_NOT_ALLOWED:
                allowed = error.get("allowed") or []
                detail = (
                    f"model {error.get('model')!r} is not allowed for this tenant's runs; allowed: "
                    + ", ".join(map(repr, allowed))
                    if allowed
                    else f"planner {error.get('planner')!r} plans with no model: a run of it cannot name one"
                )
                if error.get("at"):
                    detail = f"the agent at {error['at']}: {detail}"
                return Refusal(422, "model-not-allowed", detail, error)
            case Submission.UNKNOWN_STAGE:
                known = ", ".join(error.get("known", ()))
                detail = (
                    f"no tool is declared for stage {error.get('stage')!r}; the toolsets declare: {known}"
                )
                return Refusal(422, "unknown-stage", detail, error)
            case Submission.PLANNER_LACKS_TOOLS:
                missing = ", ".join(error.get("missing", ()))
                detail = (
                    f"planner {error.get('planner')!r} cannot plan or judge a run without {missing}, "
                    "which this run cannot use"
                )
                if lacks := error.get("resource_lacks"):
                    detail += f": they bind {', '.join(map(repr, lacks))}, which the run's resource lacks"
                return Refusal(422, "planner-lacks-tools", detail, error)
            case Submission.BUDGET_ABOVE_LIMIT:
                return Refusal(
                    422, "budget-above-limit", str(error.get("message")), {"above": error.get("above")}
                )
            case Submission.UNAVAILABLE:
                detail = "the run store cannot be reached; nothing was accepted, retry later"
                return Refusal(503, "database-unavailable", detail, retry_after_s=DATABASE_RETRY_AFTER_S)
            case Submission.SHUTTING_DOWN:
                detail = "the server is stopping and hands its runs over; nothing was accepted, retry later"
                return Refusal(503, "shutting-down", detail, retry_after_s=SUPERVISOR_RETRY_AFTER_S)
            case Submission.RUN_NOT_FOUND:
                return Refusal(404, "run-not-found", "no run with this id was found")
            case Submission.RUN_NOT_FINISHED:
                detail = f"the run is {error.get('run_status')}: only a run that has ended can be continued"
                return Refusal(409, "run-not-finished", detail, error)
            case Submission.RUN_NOT_CONTINUABLE:
                detail = (
                    f"the run ended {error.get('run_status')}: only a stopped run, or one that needs a person, can "
                    "be continued (start a new run instead)"
                )
                return Refusal(409, "run-not-continuable", detail, error)
            case Submission.HISTORY_PRUNED:
                detail = "retention removed the run's events: what succeeded in it is not known any more"
                return Refusal(410, "history-pruned", detail)
            case Submission.ALREADY_CONTINUED:
                detail = "the run was already continued, by a different request: its continuation is run_id"
                return Refusal(409, "run-already-continued", detail, {"run_id": self.run_id})
            case _:
                assert_never(self.outcome)


def refused_submission(refusal: RunRefusal) -> SubmitResult:
    """Admission's refusal, as the submission's answer (whichever surface asked admission)."""
    match refusal:
        case NoPlanner(known=known):
            return SubmitResult(Submission.NO_PLANNER, error={"known": list(known)})
        case UnknownPlanner(planner=planner, known=known):
            return SubmitResult(Submission.UNKNOWN_PLANNER, error={"planner": planner, "known": list(known)})
        case PlannerUnavailable(planner=planner, reason=reason):
            return SubmitResult(Submission.PLANNER_UNAVAILABLE, error={"planner": planner, "reason": reason})
        case ModelNotAllowed(model=model, planner=planner, allowed=allowed, at=at):
            where = {"at": at} if at is not None else {}
            return SubmitResult(
                Submission.MODEL_NOT_ALLOWED,
                error={"model": model, "planner": planner, "allowed": list(allowed), **where},
            )
        case OverLimits(error=exc):
            above = {name: {"requested": asked, "limit": limit} for name, (asked, limit) in exc.above.items()}
            return SubmitResult(Submission.BUDGET_ABOVE_LIMIT, error={"message": str(exc), "above": above})
        case PlanRefused(error=exc):
            return SubmitResult(Submission.PLAN_INVALID, error=exc.as_dict())
        case ResourceUnfit(mismatch=mismatch):
            return SubmitResult(
                Submission.RESOURCE_MISMATCH, error={"message": mismatch.message, **mismatch.as_dict()}
            )
        case UnknownStage(stage=stage, known=known):
            return SubmitResult(Submission.UNKNOWN_STAGE, error={"stage": stage, "known": list(known)})
        case PlannerLacksTools(planner=planner, missing=missing, lacking=lacking):
            error: dict[str, Any] = {"planner": planner, "missing": list(missing)}
            if lacking:
                error["resource_lacks"] = list(lacking)
            return SubmitResult(Submission.PLANNER_LACKS_TOOLS, error=error)
        case _:
            assert_never(refusal)


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

"""The shape of every answer the API gives, as the OpenAPI document publishes it: a run, its nodes and events,
its operations, reviews and questions.

These are declared as each route's ``response_model``: FastAPI serialises an answer through them, so an answer
and its published schema cannot drift apart. ``actors.api.views`` builds them from the stored rows."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dag.states import RunStatus

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
"""An ISO 8601 moment with its offset, as ``datetime.isoformat`` writes it."""


def _none(value: object) -> bool:
    return value is None


class ErrorView(BaseModel):
    """Why a call failed: ``kind`` (transient, timeout, business, ...), the tool's or raydag's ``code``, and a
    message."""

    kind: str
    code: str
    message: str


class RunSummary(BaseModel):
    """A run, but for its plan and result."""

    run_id: str
    resource: dict[str, str]
    case_id: str | None = Field(
        default=None,
        exclude_if=_none,
        description="The caseops shorthand, present when the resource has a `case_id`: its value.",
    )
    goal: str
    planner: str
    status: RunStatus
    stop_reason: str | None
    detail: str | None
    created_at: Timestamp
    finished_at: Timestamp | None
    continues: str | None = Field(description="The run this one continues.")
    continued_by: str | None = Field(description="The run that continues this one.")


class RunView(RunSummary):
    """A run: its summary, plan and result."""

    result: dict[str, Any] | None
    plan: dict[str, Any] | None


class RunCancelled(RunView):
    """A run a cancellation was asked of, as it is now."""

    cancel: Literal["cancelled", "already_finished"]


class PolicyDecision(BaseModel):
    """The policy's answer for a node."""

    allowed: bool
    rule_id: str
    reason: str


class AttemptView(BaseModel):
    """One attempt of a node, as the tool ledger holds it."""

    attempt: int
    status: str
    error: ErrorView | None
    dispatched_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None


class NodeView(BaseModel):
    """One node of a run."""

    node_id: str
    round: int
    tool: str
    args: dict[str, Any] | None = Field(
        description='Resolved; `{"sha256": ...}` instead for a tool whose contract records digests.'
    )
    fingerprint: str | None
    status: str
    attempts: int
    dispatched_at: Timestamp | None
    started_at: Timestamp | None
    finished_at: Timestamp | None
    error: ErrorView | None
    decision: PolicyDecision | None
    reused_from: str | None
    reused_from_run: str | None
    for_each_parent: str | None
    children: list[str] | None
    history: list[AttemptView]


class EventView(BaseModel):
    """One recorded transition of a run: its ``seq``, ``kind``, when it was recorded, and the event's own
    fields (which depend on its kind)."""

    model_config = ConfigDict(extra="allow")

    seq: int
    kind: str
    recorded_at: Timestamp


class TransitionView(BaseModel):
    """One move of an operation: from where to where, by whom, why and when."""

    model_config = ConfigDict(populate_by_name=True)

    from_state: str | None = Field(alias="from")
    to: str
    actor: str = Field(
        description="`supervisor:NAME`, `policy:RULE`, `person:TENANT/SUBJECT`, `reconcile:TOOL` or `deadline`."
    )
    note: str | None
    at: Timestamp


class OperationView(BaseModel):
    """One write of a run, as the operation ledger holds it."""

    operation_id: str
    run_id: str = Field(description="The run that proposed it.")
    node_id: str
    tool: str
    description: str
    risk: str
    approval: str
    state: str
    args: dict[str, Any] | None = Field(description="Resolved; `null` where the tool records digests.")
    args_hash: str = Field(description="SHA-256 of the canonical arguments: what a decision quotes.")
    attempts: int
    expires_at: Timestamp | None
    created_at: Timestamp
    updated_at: Timestamp
    output: Any = Field(description="What the write answered (a digest where the tool records digests).")
    error: ErrorView | None
    history: list[TransitionView]


class ReviewView(BaseModel):
    """A round's plan put to a person's review, and what became of it."""

    round: int
    state: str
    plan: dict[str, Any]
    plan_hash: str
    nodes: list[str]
    requested_by: str
    expires_at: Timestamp
    decided_by: str | None
    decided_at: Timestamp | None
    note: str | None
    created_at: Timestamp


class QuestionView(BaseModel):
    """A question a run's planner asked a person, and its answer."""

    number: int
    round: int
    state: str
    question: str
    asked_for: str
    expires_at: Timestamp
    answer: str | None
    answered_by: str | None
    answered_at: Timestamp | None
    created_at: Timestamp


class DependencyCheck(BaseModel):
    """Whether a dependency answered within the readiness timeout, how fast, and why not."""

    ok: bool
    ms: float | None = Field(default=None, exclude_if=_none)
    reason: str | None = Field(default=None, exclude_if=_none)


class Liveness(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ready"]
    checks: dict[str, DependencyCheck]
    toolsets: dict[str, Any] = Field(description="Each toolset server's state (docs/TOOLSETS.md).")

"""Run events: one per transition, appended in order; the run's state is their fold."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

from dag.budget import Budgets
from dag.policy import Decision
from dag.states import RunStatus, StopReason


class ErrorKind(StrEnum):
    """Who must act on a failed node: the plan (contract), the policy, the data, or the infrastructure."""

    CONTRACT = "contract"
    AUTHORIZATION = "authorization"
    BUSINESS = "business"
    TRANSIENT = "transient"
    PROTOCOL = "protocol"
    UNKNOWN_EFFECT = "unknown_effect"


class NodeError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ErrorKind
    code: str
    message: str


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    at: datetime


class RunCreated(_Event):
    kind: Literal["run_created"] = "run_created"
    run_id: str
    tenant_id: str
    subject: str
    scopes: tuple[str, ...]
    case_id: str
    goal: str
    planner: str
    budgets: Budgets
    proposal: dict[str, JsonValue] | None = None
    """A plan the requester proposed; it is validated and authorized like any planner's."""
    stage: str = "investigate"
    trace: dict[str, str] | None = None
    """W3C trace context of the request that created the run: the run's spans join that trace."""
    tenant_tools: tuple[str, ...] | None = None
    """The tenant's tool catalogue when the run was created (``None``: every tool)."""


class PlanningStarted(_Event):
    kind: Literal["planning_started"] = "planning_started"
    round: int
    reason: str | None = None
    """Why the joiner asked for this round (a replan), if it did."""


class PlanAccepted(_Event):
    kind: Literal["plan_accepted"] = "plan_accepted"
    round: int
    plan: dict[str, JsonValue]


class PlanNodeAccepted(_Event):
    """One node of a plan that is still being written (a streamed plan), valid on arrival."""

    kind: Literal["plan_node_accepted"] = "plan_node_accepted"
    round: int
    node: dict[str, JsonValue]


class PlanCompleted(_Event):
    """A streamed plan ended: whole, or cut short by a malformed tail (what ran before it stands)."""

    kind: Literal["plan_completed"] = "plan_completed"
    round: int
    complete: bool
    detail: str | None = None


class ModelUsed(_Event):
    """A model call made for the run, charged against its token and cost budgets."""

    kind: Literal["model_used"] = "model_used"
    purpose: Literal["plan", "join"]
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float = 0.0


class NodeExpanded(_Event):
    """A ``for_each`` node became ``count`` children ``id[0]`` … ``id[count-1]``."""

    kind: Literal["node_expanded"] = "node_expanded"
    node_id: str
    count: int


class NodeDispatched(_Event):
    kind: Literal["node_dispatched"] = "node_dispatched"
    node_id: str
    tool: str
    args: dict[str, JsonValue]
    fingerprint: str
    attempt: int
    decision: Decision


class NodeDenied(_Event):
    kind: Literal["node_denied"] = "node_denied"
    node_id: str
    tool: str
    args: dict[str, JsonValue]
    fingerprint: str
    decision: Decision


class NodeReused(_Event):
    """The fingerprint gate: an identical action already ran in this run, so its output is reused."""

    kind: Literal["node_reused"] = "node_reused"
    node_id: str
    tool: str
    args: dict[str, JsonValue]
    fingerprint: str
    source_node_id: str


class NodeRetryScheduled(_Event):
    """Attempt ``attempt`` failed transiently; the next one is dispatched after ``delay_s``."""

    kind: Literal["node_retry_scheduled"] = "node_retry_scheduled"
    node_id: str
    attempt: int
    error: NodeError
    delay_s: float
    started_at: datetime | None = None
    finished_at: datetime | None = None


class NodeSucceeded(_Event):
    kind: Literal["node_succeeded"] = "node_succeeded"
    node_id: str
    output: JsonValue
    started_at: datetime
    finished_at: datetime


class NodeFailed(_Event):
    kind: Literal["node_failed"] = "node_failed"
    node_id: str
    error: NodeError
    started_at: datetime | None = None
    finished_at: datetime | None = None


class NodeSkipped(_Event):
    kind: Literal["node_skipped"] = "node_skipped"
    node_id: str
    cause_node_id: str


class GroupSettled(_Event):
    """Every child of a ``for_each`` node has ended; the node succeeds only if all of them did."""

    kind: Literal["group_settled"] = "group_settled"
    node_id: str
    succeeded: bool


class JoinStarted(_Event):
    kind: Literal["join_started"] = "join_started"
    round: int
    interrupted_by: StopReason | None = None
    """The hard limit that ended the round early, if one did: without a verified answer it ends the run."""
    reason: str | None = None


class RunRecovered(_Event):
    """A supervisor took the run over after its previous owner stopped (crash, restart, lost lease).

    It changes no status: in-flight calls are dispatched again and the run goes on from where it was.
    Recovery consumes no budget.
    """

    kind: Literal["run_recovered"] = "run_recovered"
    owner: str
    previous_owner: str | None
    redispatched: tuple[str, ...] = ()


class RunFinished(_Event):
    kind: Literal["run_finished"] = "run_finished"
    status: RunStatus
    stop_reason: StopReason | None = None
    detail: str | None = None
    result: dict[str, JsonValue] | None = None


RunEvent = Annotated[
    RunCreated
    | PlanningStarted
    | PlanAccepted
    | PlanNodeAccepted
    | PlanCompleted
    | ModelUsed
    | NodeExpanded
    | NodeDispatched
    | NodeDenied
    | NodeReused
    | NodeRetryScheduled
    | NodeSucceeded
    | NodeFailed
    | NodeSkipped
    | GroupSettled
    | JoinStarted
    | RunRecovered
    | RunFinished,
    Field(discriminator="kind"),
]

_EVENT_ADAPTER: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)


def event_from_json(data: Any) -> RunEvent:
    """Parse a stored event."""
    return _EVENT_ADAPTER.validate_python(data)


def event_to_json(event: RunEvent) -> dict[str, Any]:
    return event.model_dump(mode="json")


def event_node_id(event: RunEvent) -> str | None:
    return getattr(event, "node_id", None)

"""Run events: one per transition, appended in order; the run's state is their fold."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, field_validator, model_validator
from pydantic_core import PydanticSerializationError

from dag.budget import Budgets
from dag.policy import Decision
from dag.states import RunStatus, StopReason
from dag.storable import storable_text


class ErrorKind(StrEnum):
    """Who must act on a failed node: the plan (contract), the policy, the data, or the infrastructure."""

    CONTRACT = "contract"
    AUTHORIZATION = "authorization"
    BUSINESS = "business"
    TRANSIENT = "transient"
    PROTOCOL = "protocol"
    UNKNOWN_EFFECT = "unknown_effect"


class RuntimeFailure(StrEnum):
    """Codes of failures in raydag's own machinery. They say nothing about the tool: the circuit breaker
    ignores them, and a retry after one does not use up the tool's attempts."""

    WORKER_FAILED = "WORKER_FAILED"
    """The process making the call died, or the call could not reach it."""
    SUPERVISOR_RECOVERED = "SUPERVISOR_RECOVERED"
    """The supervisor that dispatched the call stopped before recording its outcome."""


_RUNTIME_CODES = frozenset(code.value for code in RuntimeFailure)

INFRASTRUCTURE_KINDS = frozenset({ErrorKind.TRANSIENT, ErrorKind.PROTOCOL, ErrorKind.UNKNOWN_EFFECT})
"""Failures that tell nothing about the data: the call's answer was never learned."""


class NodeError(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ErrorKind
    code: str
    message: str

    @field_validator("code", "message")
    @classmethod
    def _storable(cls, text: str) -> str:
        """A tool writes its own codes and messages, and may put in them what no event can hold (NUL, a lone
        surrogate): those characters become U+FFFD, so the failure is recorded like any other."""
        return storable_text(text)

    @property
    def runtime_failure(self) -> bool:
        """raydag's own machinery failed, not the tool."""
        return self.code in _RUNTIME_CODES

    @property
    def infrastructure(self) -> bool:
        """The call failed without an answer: its node is missing evidence, not evidence of anything."""
        return self.kind in INFRASTRUCTURE_KINDS


class _Event(BaseModel):
    # NaN and Infinity encode as ``json.dumps`` writes them (and PostgreSQL refuses), not as ``null``: a
    # number that cannot be stored fails its append instead of being recorded as something else.
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    at: datetime


class ParentLink(BaseModel):
    """The run is an agent node's child run: whose, which node, how deep (the parent's depth + 1), and the
    inputs the node resolved for it (data, never instructions)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    node_id: str
    depth: int = Field(ge=1)
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    max_steps: int | None = Field(default=None, ge=1)
    """The child is a loop agent's: its model's rounds (steps), at most this many (``None``: not a loop)."""


class RunCreated(_Event):
    kind: Literal["run_created"] = "run_created"
    run_id: str
    tenant_id: str
    subject: str
    scopes: tuple[str, ...]
    resource: dict[str, str]
    """What the run is about (``{"case_id": "C-102"}``, ``{"root": "/srv/reports"}``): run-bound arguments
    are checked against it."""
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
    tool_pins: dict[str, str] | None = None
    """Each tool the run may use → a short digest of its definition as listed when the run was created. A
    supervisor that resumes the run denies a tool whose listing it pinned differs (``None``: recorded before
    runs kept their pins)."""
    review: bool = False
    """Each round's plan waits for a person's yes before anything of it runs (``dag.review``)."""
    model: str | None = None
    """The model the request named for the run's planning, admitted by its tenant's policy; ``None``: the
    planner's own."""
    parent: ParentLink | None = None
    """The agent node this run is the child run of (``None``: a run of its own, depth 0)."""

    @model_validator(mode="before")
    @classmethod
    def _upcast_case_id(cls, data: Any) -> Any:
        """Events stored before runs named a resource carry ``case_id``: that was their resource."""
        if isinstance(data, dict) and "case_id" in data and "resource" not in data:
            data = dict(data)
            data["resource"] = {"case_id": data.pop("case_id")}
        return data


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
    reported: bool = True
    """``False``: the endpoint did not report this call's usage; the tokens are an upper bound, charged as such."""


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
    """The fingerprint gate: an identical action already ran in this run, or succeeded in the run this one
    continues (``source_run_id``), so its output is reused."""

    kind: Literal["node_reused"] = "node_reused"
    node_id: str
    tool: str
    args: dict[str, JsonValue]
    fingerprint: str
    source_node_id: str
    source_run_id: str | None = None
    """The earlier run whose output is reused (``RunContinued.outputs``); ``None``: this run's own node."""


class NodeTaskUpdated(_Event):
    """A node's call runs as a task on its MCP server: the first of an attempt records the task's handle
    before anything waits on it; each later one, a status or message the server reported since. A run resumed
    elsewhere follows ``task`` (its id and session) instead of calling the tool again."""

    kind: Literal["node_task_updated"] = "node_task_updated"
    node_id: str
    attempt: int
    task: dict[str, JsonValue]


class AgentStarted(_Event):
    """An agent node's child run is named before it is created: a supervisor that resumes the parent attaches
    to this child, never creates a second one."""

    kind: Literal["agent_started"] = "agent_started"
    node_id: str
    child_run_id: str
    reserved_tokens: int = Field(default=0, ge=0)
    """The tokens carved for a child that asks a model: held from the parent's until the child ends (its
    siblings are carved from what is left beside it)."""
    reserved_cost_usd: float = Field(default=0.0, ge=0)
    """The cost carved for it, held likewise."""


class AgentEnded(_Event):
    """An agent node's child run ended: what it spent is the parent's spend too (recorded before the node's
    own outcome)."""

    kind: Literal["agent_ended"] = "agent_ended"
    node_id: str
    child_run_id: str
    status: RunStatus
    stop_reason: StopReason | None = None
    nodes: int = Field(ge=0)
    tokens: int = Field(ge=0)
    cost_usd: float = Field(ge=0)


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
    """The hard limit that ended the round early, if one did: whatever the join decides, it ends the run."""
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


class RunWaiting(_Event):
    """The run waits for a person: ``operation_ids`` are writes awaiting an approval or a resolution. Other
    branches of the DAG go on meanwhile; the run is not finished."""

    kind: Literal["run_waiting"] = "run_waiting"
    operation_ids: tuple[str, ...]
    reason: str


class PlanReviewRequested(_Event):
    """The round's plan waits for a person's yes, quoting ``plan_hash``, before anything of it runs;
    ``nodes`` are those no earlier yes covered."""

    kind: Literal["plan_review_requested"] = "plan_review_requested"
    round: int
    plan_hash: str
    nodes: tuple[str, ...]
    expires_at: datetime


class PlanReviewed(_Event):
    """What became of the round's review: approved (the round runs), rejected or expired (the run stops)."""

    kind: Literal["plan_reviewed"] = "plan_reviewed"
    round: int
    plan_hash: str
    verdict: Literal["approved", "rejected", "expired"]
    by: str
    """Who decided: ``person:TENANT/SUBJECT``, or ``supervisor:NAME`` for an expiry."""


class QuestionAsked(_Event):
    """The planner answered with a question instead of a plan: the run waits for a person's answer."""

    kind: Literal["question_asked"] = "question_asked"
    round: int
    number: int
    """The question's number in the run, from 1."""
    text: str
    expires_at: datetime


class QuestionAnswered(_Event):
    """What became of the question: answered (the planner is asked again, with the answer and its author), or
    expired (the run stops)."""

    kind: Literal["question_answered"] = "question_answered"
    number: int
    answer: str | None
    by: str
    """Who answered: ``person:TENANT/SUBJECT``; ``supervisor:NAME`` for an expiry."""


class CarriedOutput(BaseModel):
    """A read that succeeded in an earlier run of a continued chain, or an agent node whose child run completed
    there (``tool`` empty; its output names the child run): its output is reused, not called (or run) again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fingerprint: str
    tool: str
    args: dict[str, JsonValue]
    output: JsonValue
    run_id: str
    node_id: str


class CarriedChild(BaseModel):
    """An agent node whose child run did not complete in an earlier run of a continued chain: the continuation's
    identical agent node (the same ``fingerprint``) starts its child as a continuation of ``child_run_id``, if
    that run may be continued, so that nothing its child's earlier runs read is read again."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fingerprint: str
    child_run_id: str
    run_id: str
    """The earlier parent run the child ran for."""
    node_id: str


class CarriedOperation(BaseModel):
    """A write of an earlier run of the chain that the continuation takes over by id: proposed again with
    these exact arguments, it is that operation (a succeeded one is never executed again; an unknown one is
    reconciled first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str
    args_hash: str
    operation_id: str


class CarriedAnswer(BaseModel):
    """A person's answer the planner was shown in an earlier run of the chain, or the one given to continue."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    question: str
    answer: str
    by: str


class RunContinued(_Event):
    """The run continues ``continues``, which stopped: recorded with ``run_created`` in one transaction, before
    anything else. What it carries is the whole of what the earlier runs lend it; their records stay as they
    were."""

    kind: Literal["run_continued"] = "run_continued"
    continues: str
    by: str
    """Who continued: ``person:TENANT/SUBJECT``."""
    outputs: tuple[CarriedOutput, ...] = ()
    operations: tuple[CarriedOperation, ...] = ()
    answers: tuple[CarriedAnswer, ...] = ()
    children: tuple[CarriedChild, ...] = ()
    """The agent nodes whose child runs did not complete: their children are continued, not started anew."""


class RunResumed(_Event):
    """Nothing the run waited on waits any more: every operation was decided or settled."""

    kind: Literal["run_resumed"] = "run_resumed"


class RunParked(_Event):
    """The run waits for people and for nothing else: no supervisor drives it until one of ``waits`` is
    decided or ``wake_at`` comes (the first of its waits' deadlines; ``None``: none has one). Its clock stops
    meanwhile: the time parked does not count against ``deadline_s``."""

    kind: Literal["run_parked"] = "run_parked"
    waits: tuple[str, ...]
    """What it waits on: ``operation:<id>``, ``review:<round>``, ``question:<number>``."""
    wake_at: datetime | None = None


class RunWoken(_Event):
    """A supervisor drives the parked run again: a wait was decided, a deadline came, or it was cancelled."""

    kind: Literal["run_woken"] = "run_woken"
    owner: str


class RunFinished(_Event):
    kind: Literal["run_finished"] = "run_finished"
    status: RunStatus
    stop_reason: StopReason | None = None
    detail: str | None = None
    result: dict[str, JsonValue] | None = None


RunEvent = Annotated[
    RunCreated
    | RunContinued
    | PlanningStarted
    | PlanAccepted
    | PlanNodeAccepted
    | PlanCompleted
    | ModelUsed
    | NodeExpanded
    | NodeDispatched
    | NodeDenied
    | NodeReused
    | NodeTaskUpdated
    | AgentStarted
    | AgentEnded
    | NodeRetryScheduled
    | NodeSucceeded
    | NodeFailed
    | NodeSkipped
    | GroupSettled
    | JoinStarted
    | RunRecovered
    | RunWaiting
    | RunResumed
    | RunParked
    | RunWoken
    | PlanReviewRequested
    | PlanReviewed
    | QuestionAsked
    | QuestionAnswered
    | RunFinished,
    Field(discriminator="kind"),
]

_EVENT_ADAPTER: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)


def event_from_json(data: Any) -> RunEvent:
    """Parse a stored event."""
    return _EVENT_ADAPTER.validate_python(data)


def event_to_json(event: RunEvent) -> dict[str, Any]:
    return event.model_dump(mode="json")


def events_to_json_text(events: Sequence[RunEvent]) -> str:
    """``events`` as the text of one JSON array: the values of ``event_to_json``, encoded by pydantic's own
    serialiser, which costs a third to a fifth of building the dicts and passing them to ``json.dumps``."""
    return f"[{','.join(_event_json_text(event) for event in events)}]"


def _event_json_text(event: RunEvent) -> str:
    try:
        return event.model_dump_json()
    except PydanticSerializationError:
        # Pydantic's JSON serialiser stops one level short of what its validator builds (a value 254 arrays
        # deep). What a run builds stays within ``MAX_DEPTH``, but a proposal naming a tool whose server is not
        # listed yet is recorded as the caller sent it; ``json.dumps`` goes on. PostgreSQL parses the text into
        # ``jsonb``, so how it is spaced or escaped does not matter.
        return json.dumps(event_to_json(event))


def event_node_id(event: RunEvent) -> str | None:
    return getattr(event, "node_id", None)

"""The shape of every answer the API gives, as the OpenAPI document publishes it: a run, its nodes and events,
its operations, reviews and questions, a page of runs, and the decisions that wait for people.

These are declared as each route's ``response_model``: FastAPI serialises an answer through them, so an answer
and its published schema cannot drift apart. ``actors.api.views`` builds them from the stored rows."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from dag.states import RunStatus

Timestamp = Annotated[str, Field(json_schema_extra={"format": "date-time"})]

_SHA256 = re.compile(r"[0-9a-f]{64}")


def _quoted_hash(value: str) -> str:
    if _SHA256.fullmatch(value) is None:
        raise PydanticCustomError(
            "hash_format",
            "not a hash as the listing shows it: a SHA-256 is 64 characters 0-9 and a-f (this is {length}); "
            "copy it whole from the listing, `raydag inbox` or `raydag approvals list`",
            {"length": len(value)},
        )
    return value


QuotedHash = Annotated[
    str,
    AfterValidator(_quoted_hash),
    Field(json_schema_extra={"pattern": f"^{_SHA256.pattern}$"}),
]
"""A hash a decision quotes (``args_hash``, ``plan_hash``): refused, if it cannot be one, with what one is."""
"""An ISO 8601 moment with its offset, as ``datetime.isoformat`` writes it."""


def _none(value: object) -> bool:
    return value is None


class ErrorView(BaseModel):
    """Why a call failed: ``kind`` (transient, timeout, business, ...), the tool's or raydag's ``code``, and a
    message."""

    kind: str
    code: str
    message: str


class AgentParent(BaseModel):
    """The agent node a child run runs for."""

    run_id: str
    node_id: str


class RunSummary(BaseModel):
    """A run as a page of runs lists it: all but its plan, result and what it waits for."""

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
    parent: AgentParent | None = Field(
        default=None, description="The agent node this run is the child run of (docs/AGENTS.md)."
    )
    depth: int = Field(default=0, description="How deep among agent runs: 0 for a run of its own.")
    children: list[str] = Field(
        default_factory=list, description="The child runs of this run's agent nodes, oldest first."
    )


class PendingDecision(BaseModel):
    """A decision that waits for a person, as the inbox lists it and a waiting run names it."""

    run_id: str = Field(description="The run that waits for it.")
    requested_by: str = Field(description="`TENANT/SUBJECT`: the run's own principal, who asked for the run.")
    resource: dict[str, str] = Field(description="What the run is about.")
    created_at: Timestamp
    expires_at: Timestamp | None = Field(
        description="Its deadline; `null` for an unknown outcome, which a person may resolve at any time."
    )
    decidable: bool = Field(
        description="Whether the caller may decide it: it holds the kind's scope, and is not the run's own "
        "principal where its tenant's policy bars that."
    )
    decide: dict[str, str] = Field(
        description="Each way to decide it (`approve`, `reject`, `resolve`, `answer`) and the path to POST to."
    )
    parent: AgentParent | None = Field(
        default=None,
        description="What the run serves when it is an agent node's child run: its parent run and that node.",
    )
    root_run_id: str | None = Field(
        default=None,
        description="The run of its own at the top of the child run's tree of agent runs; `null` for a run "
        "of its own.",
    )


class PendingOperation(PendingDecision):
    """A write awaiting a person's approval, or whose outcome is unknown and awaits a person's resolution."""

    kind: Literal["operation"]
    state: Literal["awaiting_approval", "unknown"]
    operation_id: str
    node_id: str
    tool: str
    description: str
    risk: str
    args: dict[str, Any] | None = Field(
        description="The resolved arguments the write is sent (`null` where the tool records digests); raydag "
        "adds the operation id where the tool takes it as its idempotency key."
    )
    args_hash: str = Field(description="SHA-256 of the canonical arguments: what a decision quotes.")


class PendingReview(PendingDecision):
    """A round's plan awaiting a person's review."""

    kind: Literal["review"]
    round: int
    plan: dict[str, Any]
    plan_hash: str = Field(description="SHA-256 of the plan's canonical JSON: what a decision quotes.")
    nodes: list[str] = Field(
        description="The plan's nodes no earlier yes covered: what this review is about."
    )


class PendingQuestion(PendingDecision):
    """A planner's question awaiting a person's answer."""

    kind: Literal["question"]
    number: int
    round: int
    question: str


class PendingToolQuestion(PendingDecision):
    """A tool's question awaiting a person's answer: the tool's server asked it mid-call, in its own words."""

    kind: Literal["tool_question"]
    question_id: str
    node_id: str
    server: str = Field(description="The toolset server that asked (as the toolsets file names it).")
    tool: str
    message: str = Field(description="The server's own words, quoted: never raydag's.")
    requested_schema: dict[str, Any] = Field(description="The JSON Schema an answer's `content` must fit.")


PendingItem = Annotated[
    PendingOperation | PendingReview | PendingQuestion | PendingToolQuestion, Field(discriminator="kind")
]


class RunView(RunSummary):
    """A run: its summary, plan and result, and — while it waits — the decisions it waits for."""

    result: dict[str, Any] | None
    plan: dict[str, Any] | None
    waiting_for: list[PendingItem] = Field(
        description="While the run is `waiting`: the decisions it waits for, its child runs' too (each item "
        "names its `run_id`), soonest deadline first (at most 100; `GET /decisions?run_id=` pages through "
        "more). Empty otherwise."
    )


class RunCancelled(RunView):
    """A run a cancellation was asked of, as it is now."""

    cancel: Literal["cancelled", "already_finished"]


class RunsPage(BaseModel):
    """A page of runs, newest first."""

    items: list[RunSummary]
    next: str | None = Field(description="The cursor of the next page (`?cursor=`); `null` on the last page.")


class DecisionsPage(BaseModel):
    """A page of the decisions that wait for people, soonest deadline first."""

    items: list[PendingItem]
    next: str | None = Field(description="The cursor of the next page (`?cursor=`); `null` on the last page.")


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
    task: TaskView | None = Field(
        default=None, description="The MCP task the current attempt's call runs as, as last reported."
    )
    child_run_id: str | None = Field(
        default=None, description="An agent node's child run (docs/AGENTS.md); its `parent` names this node."
    )


class TaskView(BaseModel):
    """A node's call running as an MCP task on its server: the task's id, status and status message."""

    task_id: str
    server: str
    status: str
    message: str | None


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


class SharerView(BaseModel):
    """A run that shares an operation: it proposed the intent first, or joined it."""

    run_id: str
    node_id: str
    joined_at: Timestamp


class OperationView(BaseModel):
    """One write of a run, as the operation ledger holds it."""

    operation_id: str
    run_id: str = Field(description="The run that proposed it first.")
    node_id: str
    shared: bool = Field(description="Whether another run shares it: one intent, proposed by several runs.")
    runs: list[SharerView] = Field(
        description="Every run that shares it, in the order they proposed or joined it."
    )
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


class ToolQuestionView(BaseModel):
    """A question a tool's server asked a person mid-call, and what became of it."""

    question_id: str
    node_id: str
    attempt: int
    server: str = Field(description="The toolset server that asked.")
    tool: str
    message: str = Field(description="The server's own words, quoted: never raydag's.")
    requested_schema: dict[str, Any] = Field(description="The JSON Schema an answer's `content` must fit.")
    state: str = Field(
        description="`awaiting`, `answered`, `declined`, `expired` (nobody decided it in time, or the run "
        "stopped: the tool was told `cancel`) or `withdrawn` (the tool went on without an answer)."
    )
    asked_for: str
    expires_at: Timestamp
    content: dict[str, Any] | None = Field(description="The answer sent to the tool, once answered.")
    decided_by: str | None
    decided_at: Timestamp | None
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

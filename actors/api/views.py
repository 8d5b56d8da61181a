"""The public shapes of what raydag keeps, built from its rows: a run, its nodes and events, its operations,
reviews and questions, and the decisions that wait for people. One definition for the HTTP API, the CLI and
the Python API (which take them as JSON: ``as_json``); the shapes themselves are ``actors.api.schemas``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from actors.api.schemas import (
    AgentParent,
    AttemptView,
    ErrorView,
    EventView,
    NodeView,
    OperationView,
    PendingItem,
    PendingOperation,
    PendingQuestion,
    PendingReview,
    PendingToolQuestion,
    PolicyDecision,
    QuestionView,
    ReviewView,
    RunSummary,
    RunView,
    SharerView,
    TaskView,
    ToolQuestionView,
    TransitionView,
)
from actors.run.approvals import decidable
from actors.store.database import create_pool
from actors.store.listing import Lineage, Pending
from actors.store.operations import Operation, Sharer, Transition
from actors.store.questions import Question
from actors.store.reviews import Review
from actors.store.runs import RunStore, StoredEvent
from actors.store.tool_questions import ToolQuestion
from dag.contracts import Recording, ToolCatalogue
from dag.events import NodeError, event_to_json
from dag.fingerprint import sha256_hex
from dag.operations import OperationState
from dag.policy import Principal, TenantPolicy
from dag.run_state import NodeState, RunState, fold


def iso(moment: datetime | None) -> str | None:
    """``moment`` as ISO 8601, or ``None``."""
    return moment.isoformat() if moment is not None else None


def as_json(view: BaseModel) -> dict[str, Any]:
    """A view as the API answers it, as plain JSON values (the CLI's and the Python API's)."""
    return view.model_dump(mode="json", by_alias=True)


def _summary_fields(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": str(row["run_id"]),
        "resource": row["resource"],
        # The caseops shorthand, for clients written before runs named a resource.
        "case_id": row["case_id"],
        "goal": row["goal"],
        "planner": row["planner"],
        "status": row["status"],
        "stop_reason": row["stop_reason"],
        "detail": row["detail"],
        "created_at": iso(row["created_at"]),
        "finished_at": iso(row["finished_at"]),
        # The chain of continuations, both ways: the run this one continues, and the one continuing it.
        "continues": _id_or_none(row.get("continues")),
        "continued_by": _id_or_none(row.get("continued_by")),
        # Agent runs, both ways: the agent node this run is the child run of, and this run's child runs.
        "parent": (
            {"run_id": str(row["parent_run_id"]), "node_id": row["parent_node_id"]}
            if row.get("parent_run_id") is not None
            else None
        ),
        "depth": row.get("depth") or 0,
        "children": [str(child) for child in row.get("children") or ()],
    }


def run_summary(row: dict[str, Any]) -> RunSummary:
    """A run as a page of runs lists it."""
    return RunSummary(**_summary_fields(row))


def run_view(row: dict[str, Any], waiting_for: Sequence[PendingItem] = ()) -> RunView:
    """A run, and the decisions it waits for (``waiting_for``: read by the caller, which may decide them)."""
    return RunView(
        **_summary_fields(row), result=row["result"], plan=row["plan"], waiting_for=list(waiting_for)
    )


def _id_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _error(error: NodeError | dict[str, Any] | None) -> ErrorView | None:
    if error is None:
        return None
    return ErrorView.model_validate(error.model_dump(mode="json") if isinstance(error, NodeError) else error)


def attempt_view(row: dict[str, Any]) -> AttemptView:
    return AttemptView(
        attempt=row["attempt"],
        status=row["status"],
        error=_error(row["error"]),
        dispatched_at=iso(row["dispatched_at"]),
        started_at=iso(row["started_at"]),
        finished_at=iso(row["finished_at"]),
    )


def node_view(
    node: NodeState, catalogue: ToolCatalogue, history: list[dict[str, Any]] | None = None
) -> NodeView:
    contract = catalogue.get(node.tool)
    args: dict[str, Any] | None = dict(node.args) if node.args is not None else None
    if args is not None and contract is not None and contract.recording is Recording.DIGEST:
        args = {"sha256": sha256_hex(args)}
    return NodeView(
        node_id=node.node_id,
        round=node.round,
        tool=node.tool,
        args=args,
        fingerprint=node.fingerprint,
        status=node.status.value,
        attempts=node.attempts,
        dispatched_at=iso(node.dispatched_at),
        started_at=iso(node.started_at),
        finished_at=iso(node.finished_at),
        error=_error(node.error),
        decision=PolicyDecision(**node.decision.model_dump(mode="json"))
        if node.decision is not None
        else None,
        reused_from=node.reused_from,
        reused_from_run=node.reused_from_run,
        for_each_parent=node.parent,
        children=list(node.children) if node.children is not None else None,
        history=[attempt_view(row) for row in history or []],
        task=_task(node.task),
        child_run_id=node.child_run_id or _reused_child(node),
    )


def _reused_child(node: NodeState) -> str | None:
    """The child run an agent node reused from the run its run continues (its output names it)."""
    if node.reused_from_run is None or node.tool or not isinstance(node.output, Mapping):
        return None
    child = node.output.get("run_id")
    return child if isinstance(child, str) else None


def _task(task: Mapping[str, Any] | None) -> TaskView | None:
    if task is None:
        return None
    return TaskView(
        task_id=str(task["task_id"]),
        server=str(task["server"]),
        status=str(task["status"]),
        message=task.get("message"),
    )


def nodes_view(
    state: RunState, catalogue: ToolCatalogue, ledger: list[dict[str, Any]] | None = None
) -> list[NodeView]:
    """Each node in run order, with its ledger rows (one per attempt) as ``history``."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(ledger or [], key=lambda row: (row["node_id"], row["attempt"])):
        by_node.setdefault(row["node_id"], []).append(row)
    return [node_view(state.nodes[node_id], catalogue, by_node.get(node_id)) for node_id in state.order]


def event_view(stored: StoredEvent) -> EventView:
    return EventView.model_validate(
        {"seq": stored.seq, "recorded_at": iso(stored.recorded_at), **event_to_json(stored.event)}
    )


def operation_view(
    operation: Operation, history: list[Transition], sharers: Sequence[Sharer]
) -> OperationView:
    """One operation with its history and the runs that share it: ``run_id`` and ``node_id`` name the run and
    node that proposed it first; ``runs``, every run that shares it; ``shared``, whether any other run does."""
    digest = operation.recording is Recording.DIGEST
    output = operation.output
    return OperationView(
        operation_id=operation.operation_id,
        run_id=operation.run_id,
        node_id=operation.node_id,
        shared=len(sharers) > 1,
        runs=[
            SharerView(run_id=sharer.run_id, node_id=sharer.node_id, joined_at=iso(sharer.joined_at))
            for sharer in sharers
        ],
        tool=operation.tool,
        description=operation.description,
        risk=operation.risk.value,
        approval=operation.approval.value,
        state=operation.state.value,
        args_hash=operation.args_hash,
        args=None if digest else dict(operation.args),
        attempts=operation.attempts,
        expires_at=iso(operation.expires_at),
        created_at=iso(operation.created_at),
        updated_at=iso(operation.updated_at),
        output=(sha256_hex(output) if digest else output) if output is not None else None,
        error=_error(operation.error),
        history=[
            TransitionView(
                from_state=step.from_state.value if step.from_state else None,
                to=step.to_state.value,
                actor=step.actor,
                note=step.note,
                at=iso(step.at),
            )
            for step in history
        ],
    )


def decision_view(moved: Operation, history: list[Transition], sharers: Sequence[Sharer]) -> OperationView:
    """The operation a person's decision moved, with its history as the decision left it: the run it wakes
    may move it on (approved → executing) before the history is read, and the answer shows the decision."""
    made = next(
        (
            index
            for index, step in enumerate(history)
            if step.to_state is moved.state and step.at == moved.updated_at  # one statement's now()
        ),
        len(history) - 1,
    )
    return operation_view(moved, history[: made + 1], sharers)


def review_view(review: Review) -> ReviewView:
    """One review as the API shows it."""
    return ReviewView(
        round=review.round,
        state=review.state.value,
        plan=dict(review.plan),
        plan_hash=review.plan_hash,
        nodes=list(review.nodes),
        requested_by=f"{review.tenant_id}/{review.subject}",
        expires_at=iso(review.expires_at),
        decided_by=review.decided_by,
        decided_at=iso(review.decided_at),
        note=review.note,
        created_at=iso(review.created_at),
    )


def question_view(question: Question) -> QuestionView:
    """One question as the API shows it."""
    return QuestionView(
        number=question.number,
        round=question.round,
        state=question.state.value,
        question=question.text,
        asked_for=f"{question.tenant_id}/{question.subject}",
        expires_at=iso(question.expires_at),
        answer=question.answer,
        answered_by=question.answered_by,
        answered_at=iso(question.answered_at),
        created_at=iso(question.created_at),
    )


def tool_question_view(question: ToolQuestion) -> ToolQuestionView:
    """One tool's question as the API shows it."""
    return ToolQuestionView(
        question_id=question.question_id,
        node_id=question.node_id,
        attempt=question.attempt,
        server=question.server,
        tool=question.tool,
        message=question.message,
        requested_schema=dict(question.schema),
        state=question.state.value,
        asked_for=f"{question.tenant_id}/{question.subject}",
        expires_at=iso(question.expires_at),
        content=dict(question.content) if question.content is not None else None,
        decided_by=question.decided_by,
        decided_at=iso(question.decided_at),
        created_at=iso(question.created_at),
    )


def _lineage_parent(lineage: Lineage) -> AgentParent | None:
    if lineage.parent_run_id is None or lineage.parent_node_id is None:
        return None
    return AgentParent(run_id=lineage.parent_run_id, node_id=lineage.parent_node_id)


def pending_view(pending: Pending, principal: Principal, policy: TenantPolicy) -> PendingItem:
    """A decision that waits for a person, as ``principal`` is shown it: whether it may decide it, and how."""
    row = pending.row
    common: dict[str, Any] = {
        "run_id": row.run_id,
        "requested_by": f"{row.tenant_id}/{row.subject}",
        "resource": dict(pending.resource),
        "created_at": iso(row.created_at),
        "expires_at": iso(pending.deadline),
        "decidable": decidable(row, principal, policy, pending.sharers),
        "parent": _lineage_parent(pending.lineage),
        "root_run_id": pending.lineage.root_run_id,
    }
    match row:
        case Operation():
            base = f"/runs/{row.run_id}/operations/{row.operation_id}"
            unknown = row.state is OperationState.UNKNOWN
            return PendingOperation(
                **common,
                kind="operation",
                decide={"resolve": f"{base}/resolve"}
                if unknown
                else {"approve": f"{base}/approve", "reject": f"{base}/reject"},
                state="unknown" if unknown else "awaiting_approval",
                operation_id=row.operation_id,
                node_id=row.node_id,
                tool=row.tool,
                description=row.description,
                risk=row.risk.value,
                args=None if row.recording is Recording.DIGEST else dict(row.args),
                args_hash=row.args_hash,
            )
        case Review():
            base = f"/runs/{row.run_id}/reviews/{row.round}"
            return PendingReview(
                **common,
                kind="review",
                decide={"approve": f"{base}/approve", "reject": f"{base}/reject"},
                round=row.round,
                plan=dict(row.plan),
                plan_hash=row.plan_hash,
                nodes=list(row.nodes),
            )
        case Question():
            return PendingQuestion(
                **common,
                kind="question",
                decide={"answer": f"/runs/{row.run_id}/questions/{row.number}/answer"},
                number=row.number,
                round=row.round,
                question=row.text,
            )
        case ToolQuestion():
            base = f"/runs/{row.run_id}/tool-questions/{row.question_id}"
            return PendingToolQuestion(
                **common,
                kind="tool_question",
                decide={"answer": f"{base}/answer", "decline": f"{base}/decline"},
                question_id=row.question_id,
                node_id=row.node_id,
                server=row.server,
                tool=row.tool,
                message=row.message,
                requested_schema=dict(row.schema),
            )


async def load_state(store: RunStore, run_id: str) -> RunState:
    return fold(stored.event for stored in await store.events(run_id))


async def read_report(
    dsn: str, principal: Principal, run_id: str, catalogue: ToolCatalogue
) -> dict[str, Any]:
    """The run and its nodes as the API shows them, read over a connection of its own (the CLI's and the
    Python API's report); ``catalogue`` is the supervisor's."""
    pool = await create_pool(dsn, max_size=1)
    try:
        store = RunStore(pool)
        row = await store.run_row(principal, run_id)
        assert row is not None
        state = await load_state(store, run_id)
        nodes = nodes_view(state, catalogue, await store.ledger(run_id))
        return {"run": as_json(run_view(row)), "nodes": [as_json(node) for node in nodes]}
    finally:
        await pool.close()

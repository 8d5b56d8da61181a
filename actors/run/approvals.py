"""A person's decision on an operation — approve, reject, or settle an unknown outcome — or on a run's plan, or
a person's answer to its planner's question, as every surface makes it (the HTTP API, ``import raydag``; the
CLI goes through the API).

Each decision is weighed on the row as it is (``dag.operations.approval_refusal``) and then made as one
conditional update that quotes the hash of the arguments: of two people deciding at once, one wins and the
other is told the operation was already decided. The supervisor that drives the run reads the decision from
the row; nothing here talks to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from actors.store.operations import Operation, OperationStore
from actors.store.questions import Question, QuestionStore
from actors.store.reviews import Review, ReviewStore
from dag.errors import RaydagError
from dag.operations import (
    DecisionRefusal,
    OperationState,
    OperationView,
    approval_refusal,
    resolution_refusal,
)
from dag.policy import TenantPolicy
from dag.questions import AnswerRefusal, QuestionState, answer_refusal
from dag.review import ReviewRefusal, ReviewState, review_refusal

Verdict = Literal["approve", "reject"]
Found = Literal["succeeded", "failed"]

_TARGET = {"approve": OperationState.APPROVED, "reject": OperationState.REJECTED}


class DecisionRefused(RaydagError):
    """Why a decision was not made (a problem type each: ``DecisionRefusal``)."""

    def __init__(self, refusal: DecisionRefusal) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal


@dataclass(frozen=True)
class Person:
    """Who decides: a subject of a tenant. Authentication (and the ``runs:approve`` scope) is the caller's."""

    tenant_id: str
    subject: str

    @property
    def actor(self) -> str:
        return f"person:{self.tenant_id}/{self.subject}"


async def operation_of_run(store: OperationStore, run_id: str, operation_id: str) -> OperationView:
    """The run's operation ``operation_id`` (one it proposed or joined), as a decision weighs it: among every
    run that shares it. ``DecisionRefused(NOT_FOUND)`` if the run shares none such."""
    operation = await store.get(operation_id)
    if operation is None:
        raise DecisionRefused(DecisionRefusal.NOT_FOUND)
    sharers = (await store.sharers([operation_id]))[operation_id]
    if run_id not in {sharer.run_id for sharer in sharers}:
        raise DecisionRefused(DecisionRefusal.NOT_FOUND)
    return operation.view(sharers)


async def decide(
    store: OperationStore,
    run_id: str,
    operation_id: str,
    verdict: Verdict,
    *,
    quoted_hash: str,
    person: Person,
    policy: TenantPolicy,
    note: str | None = None,
) -> Operation:
    """Approve or reject the run's operation for ``person``, quoting ``quoted_hash``: the moved row.
    ``policy``, the tenant's, says whether the principal of a run that shares it may decide it."""
    operation = await operation_of_run(store, run_id, operation_id)
    refusal = approval_refusal(
        operation, quoted_hash=quoted_hash, decider=person.subject, policy=policy, now=datetime.now(UTC)
    )
    if refusal is not None:
        raise DecisionRefused(refusal)
    moved = await store.move(
        operation_id,
        _TARGET[verdict],
        actor=person.actor,
        note=note,
        sources={OperationState.AWAITING_APPROVAL},
        quoted_hash=quoted_hash,
    )
    if moved is None:  # decided, or expired, between the read and the update
        raise DecisionRefused(DecisionRefusal.ALREADY_DECIDED)
    return moved


async def resolve(
    store: OperationStore,
    run_id: str,
    operation_id: str,
    found: Found,
    *,
    quoted_hash: str,
    person: Person,
    policy: TenantPolicy,
    note: str,
) -> Operation:
    """Settle the run's operation whose outcome is unknown with what ``person`` found (``note``: how).
    ``policy``, the tenant's, says whether the principal of a run that shares it may settle it."""
    operation = await operation_of_run(store, run_id, operation_id)
    refusal = resolution_refusal(operation, quoted_hash=quoted_hash, decider=person.subject, policy=policy)
    if refusal is not None:
        raise DecisionRefused(refusal)
    target = OperationState(found)
    moved = await store.move(
        operation_id,
        target,
        actor=person.actor,
        note=note,
        sources={OperationState.UNKNOWN},
        quoted_hash=quoted_hash,
        output={"resolved_by": person.actor, "note": note} if target is OperationState.SUCCEEDED else None,
        has_output=target is OperationState.SUCCEEDED,
    )
    if moved is None:
        raise DecisionRefused(DecisionRefusal.NOT_UNKNOWN)
    return moved


class ReviewRefused(RaydagError):
    """Why a decision on a plan was not made (a problem type each: ``ReviewRefusal``)."""

    def __init__(self, refusal: ReviewRefusal) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal


_REVIEW_TARGET = {"approve": ReviewState.APPROVED, "reject": ReviewState.REJECTED}


async def decide_plan(
    store: ReviewStore,
    run_id: str,
    round_number: int,
    verdict: Verdict,
    *,
    quoted_hash: str,
    person: Person,
    policy: TenantPolicy,
    note: str | None = None,
) -> Review:
    """Approve or reject round ``round_number``'s plan of the run for ``person``, quoting ``quoted_hash``: the
    decided review. ``policy``, the tenant's, says whether the run's own principal may decide it."""
    review = await store.current(run_id, round_number)
    if review is None:
        raise ReviewRefused(ReviewRefusal.NOT_FOUND)
    refusal = review_refusal(
        review.view, quoted_hash=quoted_hash, reviewer=person.subject, policy=policy, now=datetime.now(UTC)
    )
    if refusal is not None:
        raise ReviewRefused(refusal)
    decided = await store.decide(
        run_id, round_number, quoted_hash, _REVIEW_TARGET[verdict], actor=person.actor, note=note
    )
    if decided is None:  # decided, or expired, between the read and the update
        current = await store.get(run_id, round_number, quoted_hash)
        expired = current is not None and (
            current.state is ReviewState.EXPIRED
            or (current.state is ReviewState.AWAITING and current.expires_at <= datetime.now(UTC))
        )
        raise ReviewRefused(ReviewRefusal.EXPIRED if expired else ReviewRefusal.ALREADY_DECIDED)
    return decided


class AnswerRefused(RaydagError):
    """Why an answer to a planner's question was not taken (a problem type each: ``AnswerRefusal``)."""

    def __init__(self, refusal: AnswerRefusal) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal


async def answer_question(
    store: QuestionStore, run_id: str, number: int, answer: str, *, person: Person
) -> Question:
    """Answer question ``number`` of the run as ``person``: the answered question. The planner is shown the
    answer with its author, as an observation; nothing in it is authority."""
    question = await store.get(run_id, number)
    if question is None:
        raise AnswerRefused(AnswerRefusal.NOT_FOUND)
    refusal = answer_refusal(question.state, question.expires_at, now=datetime.now(UTC))
    if refusal is not None:
        raise AnswerRefused(refusal)
    answered = await store.settle(run_id, number, QuestionState.ANSWERED, by=person.actor, answer=answer)
    if answered is None:  # answered, or expired, between the read and the update
        current = await store.get(run_id, number)
        late = current is not None and answer_refusal(
            current.state, current.expires_at, now=datetime.now(UTC)
        )
        raise AnswerRefused(late or AnswerRefusal.ALREADY_ANSWERED)
    return answered

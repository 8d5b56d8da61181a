"""A person decides: an operation approved, rejected or its unknown outcome resolved, a run's plan approved or
rejected, a planner's question answered — one mechanism for the three kinds, as every surface makes them (the
HTTP API, ``import raydag``; the CLI goes through the API).

``Decisions`` admits the decider first, the same way for every kind: the caller holds the kind's scope
(``DecisionKind.scope``), then may read the run (its tenant, at least the run's scopes; otherwise the run does
not exist for it, exactly as an unknown run). Then the kind's decision is weighed on the row as it is (the
kind's refusal function in ``dag``) and made as one conditional update that quotes what the person was shown:
of two people deciding at once, one wins and the other is told it was already decided. Any refusal is one
type, ``DecisionRefused``, carrying the kind, the code (the API's problem type), the HTTP status and a detail.
The supervisor that drives the run reads the decision from the row; nothing here talks to it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from actors.store.operations import Operation, OperationStore
from actors.store.questions import Question, QuestionStore
from actors.store.reviews import Review, ReviewStore
from actors.store.runs import RunStore
from actors.store.tool_questions import ToolQuestion, ToolQuestionStore
from dag.errors import RaydagError
from dag.operations import (
    APPROVE_SCOPE,
    DecisionRefusal,
    OperationState,
    OperationView,
    approval_refusal,
    resolution_refusal,
)
from dag.policy import Principal, TenantPolicy
from dag.questions import ANSWER_SCOPE, AnswerRefusal, QuestionState, answer_refusal
from dag.review import REVIEW_SCOPE, ReviewRefusal, ReviewState, review_refusal
from dag.tool_questions import ToolAnswerRefusal, ToolQuestionState, content_problem
from dag.tool_questions import answer_refusal as tool_answer_refusal

Verdict = Literal["approve", "reject"]
Found = Literal["succeeded", "failed"]


class DecisionKind(StrEnum):
    """What a person decides; each kind is decided with a scope of its own."""

    OPERATION = "operation"
    REVIEW = "review"
    QUESTION = "question"
    TOOL_QUESTION = "tool_question"

    @property
    def scope(self) -> str:
        return _SCOPES[self]


_SCOPES: Mapping[DecisionKind, str] = {
    DecisionKind.OPERATION: APPROVE_SCOPE,
    DecisionKind.REVIEW: REVIEW_SCOPE,
    DecisionKind.QUESTION: ANSWER_SCOPE,
    DecisionKind.TOOL_QUESTION: ANSWER_SCOPE,
}
DECISION_SCOPES = frozenset(_SCOPES.values())
"""Every scope a person needs to decide something (a development key's default scopes hold none of them)."""


class Admission(StrEnum):
    """Why a decider was refused before any row was read: the same for every kind."""

    SCOPE_MISSING = "scope-missing"
    RUN_NOT_FOUND = "run-not-found"


RefusalCode = Admission | DecisionRefusal | ReviewRefusal | AnswerRefusal | ToolAnswerRefusal
"""A refusal's code: the problem type the API answers with, the value every surface shows."""

REFUSALS: Mapping[RefusalCode, tuple[int, str]] = {
    Admission.SCOPE_MISSING: (403, "the API key does not grant the scope this decision needs"),
    Admission.RUN_NOT_FOUND: (404, "no run with this id was found"),
    DecisionRefusal.NOT_FOUND: (404, "no operation with this id belongs to this run"),
    DecisionRefusal.HASH_MISMATCH: (
        409,
        "args_hash is not the hash of this operation's arguments: a decision applies to exact arguments only",
    ),
    DecisionRefusal.ALREADY_DECIDED: (409, "the operation was already decided"),
    DecisionRefusal.EXPIRED: (409, "the operation expired before it was decided"),
    DecisionRefusal.SELF_APPROVAL: (
        403,
        "the run's own principal may not decide its operations of this risk (its tenant's policy)",
    ),
    DecisionRefusal.NOT_UNKNOWN: (409, "only an operation whose outcome is unknown can be resolved"),
    ReviewRefusal.NOT_FOUND: (404, "this round of the run has no plan put to review"),
    ReviewRefusal.HASH_MISMATCH: (
        409,
        "plan_hash is not the hash of the plan waiting for review: a decision applies to that exact plan only",
    ),
    ReviewRefusal.ALREADY_DECIDED: (409, "the plan was already reviewed"),
    ReviewRefusal.EXPIRED: (409, "the plan's review expired before it was decided"),
    ReviewRefusal.SELF_REVIEW: (403, "the run's own principal may not review its plan (its tenant's policy)"),
    AnswerRefusal.NOT_FOUND: (404, "the run's planner asked no question of that number"),
    AnswerRefusal.ALREADY_ANSWERED: (409, "the question was already answered"),
    AnswerRefusal.EXPIRED: (409, "the question's deadline passed before it was answered"),
    ToolAnswerRefusal.NOT_FOUND: (404, "no tool's question with this id belongs to this run"),
    ToolAnswerRefusal.DECIDED: (409, "the tool's question was already answered or declined"),
    ToolAnswerRefusal.EXPIRED: (409, "the tool's question expired before it was answered"),
    ToolAnswerRefusal.WITHDRAWN: (409, "the tool stopped waiting for an answer and went on without it"),
    ToolAnswerRefusal.INVALID: (422, "the answer does not fit the schema the tool asked for"),
}
"""Each refusal's HTTP status and detail: one table for every kind."""

_NEEDS = {
    DecisionKind.OPERATION: "deciding an operation",
    DecisionKind.REVIEW: "reviewing a plan",
    DecisionKind.QUESTION: "answering a planner",
    DecisionKind.TOOL_QUESTION: "answering a tool",
}


class DecisionRefused(RaydagError):
    """Why a person's decision was not made: its ``kind``, its ``refusal`` (whose value, ``code``, is the
    problem type), the HTTP ``status`` and a ``detail``, as every surface shows them."""

    def __init__(self, kind: DecisionKind, refusal: RefusalCode, detail: str | None = None) -> None:
        status, default = REFUSALS[refusal]
        super().__init__(refusal.value)
        self.kind = kind
        self.refusal = refusal
        self.status = status
        self.detail = detail or default

    @property
    def code(self) -> str:
        return self.refusal.value


@dataclass(frozen=True)
class Person:
    """Who decides: a subject of a tenant. Authentication is the caller's; the scope is ``Decisions``'."""

    tenant_id: str
    subject: str

    @property
    def actor(self) -> str:
        return f"person:{self.tenant_id}/{self.subject}"


@dataclass(frozen=True)
class Decisions:
    """Where a person's decision is made: each method admits the caller for its kind (the scope, then the
    run readable by the caller), then decides. ``policy_of`` gives a tenant's policy (whether the run's own
    principal may decide)."""

    runs: RunStore
    operations: OperationStore
    reviews: ReviewStore
    questions: QuestionStore
    policy_of: Callable[[str], TenantPolicy]
    tool_questions: ToolQuestionStore

    async def admit(self, kind: DecisionKind, principal: Principal, run_id: str) -> str:
        """The id of the run ``principal`` may decide on for ``kind``, or the refusal: the scope is weighed
        first, then whether the run exists for the caller (another tenant's is an unknown run)."""
        if kind.scope not in principal.scopes:
            detail = f"{_NEEDS[kind]} needs the scope {kind.scope!r}"
            raise DecisionRefused(kind, Admission.SCOPE_MISSING, detail)
        row = await self.runs.run_row(principal, run_id)
        if row is None:
            raise DecisionRefused(kind, Admission.RUN_NOT_FOUND)
        return str(row["run_id"])

    async def decide_operation(
        self,
        principal: Principal,
        run_id: str,
        operation_id: str,
        verdict: Verdict,
        *,
        quoted_hash: str,
        note: str | None = None,
    ) -> Operation:
        """Approve or reject the run's operation, quoting the hash of its arguments: the moved row."""
        run = await self.admit(DecisionKind.OPERATION, principal, run_id)
        return await decide(
            self.operations,
            run,
            operation_id,
            verdict,
            quoted_hash=quoted_hash,
            person=_person(principal),
            policy=self.policy_of(principal.tenant_id),
            note=note,
        )

    async def resolve_operation(
        self,
        principal: Principal,
        run_id: str,
        operation_id: str,
        found: Found,
        *,
        quoted_hash: str,
        note: str,
    ) -> Operation:
        """Settle the run's operation whose outcome is unknown with what the caller found: the moved row."""
        run = await self.admit(DecisionKind.OPERATION, principal, run_id)
        return await resolve(
            self.operations,
            run,
            operation_id,
            found,
            quoted_hash=quoted_hash,
            person=_person(principal),
            policy=self.policy_of(principal.tenant_id),
            note=note,
        )

    async def decide_plan(
        self,
        principal: Principal,
        run_id: str,
        round_number: int,
        verdict: Verdict,
        *,
        quoted_hash: str,
        note: str | None = None,
    ) -> Review:
        """Approve or reject the round's plan, quoting its hash: the decided review."""
        run = await self.admit(DecisionKind.REVIEW, principal, run_id)
        return await decide_plan(
            self.reviews,
            run,
            round_number,
            verdict,
            quoted_hash=quoted_hash,
            person=_person(principal),
            policy=self.policy_of(principal.tenant_id),
            note=note,
        )

    async def answer(self, principal: Principal, run_id: str, number: int, answer: str) -> Question:
        """Answer the run's question ``number``: the answered question."""
        run = await self.admit(DecisionKind.QUESTION, principal, run_id)
        return await answer_question(self.questions, run, number, answer, person=_person(principal))

    async def answer_tool(
        self,
        principal: Principal,
        run_id: str,
        question_id: str,
        *,
        accept: bool,
        content: Mapping[str, Any] | None = None,
    ) -> ToolQuestion:
        """Answer a tool's question with ``content`` (``accept``), or decline it: the decided question. The
        tool is sent the answer as its input; nothing in it is authority."""
        run = await self.admit(DecisionKind.TOOL_QUESTION, principal, run_id)
        return await answer_tool_question(
            self.tool_questions, run, question_id, accept=accept, content=content, person=_person(principal)
        )


def _person(principal: Principal) -> Person:
    return Person(principal.tenant_id, principal.subject)


def decidable(
    row: Operation | Review | Question | ToolQuestion,
    principal: Principal,
    policy: TenantPolicy,
    sharers: Collection[str] = (),
) -> bool:
    """Whether ``principal`` may decide ``row`` now, as its decision would weigh it quoting what it is shown:
    the kind's scope held, and the kind's own refusal function finding nothing (the principal of a run that
    shares it — ``sharers`` for an operation — barred by its tenant's policy, a deadline passed)."""
    now = datetime.now(UTC)
    refusal: RefusalCode | None
    match row:
        case Operation():
            view = replace(row.view(()), subjects=frozenset({row.subject, *sharers}))
            kind, refusal = DecisionKind.OPERATION, _operation_refusal(view, principal.subject, policy, now)
        case Review():
            kind = DecisionKind.REVIEW
            refusal = review_refusal(
                row.view, quoted_hash=row.plan_hash, reviewer=principal.subject, policy=policy, now=now
            )
        case Question():
            kind, refusal = DecisionKind.QUESTION, answer_refusal(row.state, row.expires_at, now=now)
        case ToolQuestion():
            kind, refusal = (
                DecisionKind.TOOL_QUESTION,
                tool_answer_refusal(row.state, row.expires_at, now=now),
            )
    return kind.scope in principal.scopes and refusal is None


def _operation_refusal(
    view: OperationView, decider: str, policy: TenantPolicy, now: datetime
) -> DecisionRefusal | None:
    if view.state is OperationState.UNKNOWN:
        return resolution_refusal(view, quoted_hash=view.args_hash, decider=decider, policy=policy)
    return approval_refusal(view, quoted_hash=view.args_hash, decider=decider, policy=policy, now=now)


_TARGET = {"approve": OperationState.APPROVED, "reject": OperationState.REJECTED}


async def operation_of_run(store: OperationStore, run_id: str, operation_id: str) -> OperationView:
    """The run's operation ``operation_id`` (one it proposed or joined), as a decision weighs it: among every
    run that shares it. Refused ``operation-not-found`` if the run shares none such."""
    operation = await store.get(operation_id)
    if operation is None:
        raise DecisionRefused(DecisionKind.OPERATION, DecisionRefusal.NOT_FOUND)
    sharers = (await store.sharers([operation_id]))[operation_id]
    if run_id not in {sharer.run_id for sharer in sharers}:
        raise DecisionRefused(DecisionKind.OPERATION, DecisionRefusal.NOT_FOUND)
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
    ``policy``, the tenant's, says whether the run's own principal may decide it. The caller was admitted
    (``Decisions.admit``)."""
    operation = await operation_of_run(store, run_id, operation_id)
    refusal = approval_refusal(
        operation, quoted_hash=quoted_hash, decider=person.subject, policy=policy, now=datetime.now(UTC)
    )
    if refusal is not None:
        raise DecisionRefused(DecisionKind.OPERATION, refusal)
    moved = await store.move(
        operation_id,
        _TARGET[verdict],
        actor=person.actor,
        note=note,
        sources={OperationState.AWAITING_APPROVAL},
        quoted_hash=quoted_hash,
    )
    if moved is None:  # decided, or expired, between the read and the update
        raise DecisionRefused(DecisionKind.OPERATION, DecisionRefusal.ALREADY_DECIDED)
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
    ``policy``, the tenant's, says whether the run's own principal may settle it."""
    operation = await operation_of_run(store, run_id, operation_id)
    refusal = resolution_refusal(operation, quoted_hash=quoted_hash, decider=person.subject, policy=policy)
    if refusal is not None:
        raise DecisionRefused(DecisionKind.OPERATION, refusal)
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
        raise DecisionRefused(DecisionKind.OPERATION, DecisionRefusal.NOT_UNKNOWN)
    return moved


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
        raise DecisionRefused(DecisionKind.REVIEW, ReviewRefusal.NOT_FOUND)
    refusal = review_refusal(
        review.view, quoted_hash=quoted_hash, reviewer=person.subject, policy=policy, now=datetime.now(UTC)
    )
    if refusal is not None:
        raise DecisionRefused(DecisionKind.REVIEW, refusal)
    decided = await store.decide(
        run_id, round_number, quoted_hash, _REVIEW_TARGET[verdict], actor=person.actor, note=note
    )
    if decided is None:  # decided, or expired, between the read and the update
        current = await store.get(run_id, round_number, quoted_hash)
        expired = current is not None and (
            current.state is ReviewState.EXPIRED
            or (current.state is ReviewState.AWAITING and current.expires_at <= datetime.now(UTC))
        )
        late = ReviewRefusal.EXPIRED if expired else ReviewRefusal.ALREADY_DECIDED
        raise DecisionRefused(DecisionKind.REVIEW, late)
    return decided


async def answer_question(
    store: QuestionStore, run_id: str, number: int, answer: str, *, person: Person
) -> Question:
    """Answer question ``number`` of the run as ``person``: the answered question. The planner is shown the
    answer with its author, as an observation; nothing in it is authority."""
    question = await store.get(run_id, number)
    if question is None:
        raise DecisionRefused(DecisionKind.QUESTION, AnswerRefusal.NOT_FOUND)
    refusal = answer_refusal(question.state, question.expires_at, now=datetime.now(UTC))
    if refusal is not None:
        raise DecisionRefused(DecisionKind.QUESTION, refusal)
    answered = await store.settle(run_id, number, QuestionState.ANSWERED, by=person.actor, answer=answer)
    if answered is None:  # answered, or expired, between the read and the update
        current = await store.get(run_id, number)
        late = current is not None and answer_refusal(
            current.state, current.expires_at, now=datetime.now(UTC)
        )
        raise DecisionRefused(DecisionKind.QUESTION, late or AnswerRefusal.ALREADY_ANSWERED)
    return answered


async def answer_tool_question(
    store: ToolQuestionStore,
    run_id: str,
    question_id: str,
    *,
    accept: bool,
    content: Mapping[str, Any] | None,
    person: Person,
) -> ToolQuestion:
    """Decide a tool's question of the run as ``person``: answered with ``content`` (which must fit the schema
    the tool asked for), or declined. The decided question."""
    question = await store.get(run_id, question_id)
    if question is None:
        raise DecisionRefused(DecisionKind.TOOL_QUESTION, ToolAnswerRefusal.NOT_FOUND)
    refusal = tool_answer_refusal(question.state, question.expires_at, now=datetime.now(UTC))
    if refusal is not None:
        raise DecisionRefused(DecisionKind.TOOL_QUESTION, refusal)
    if accept:
        problem = content_problem(question.schema, content or {})
        if problem is not None:
            raise DecisionRefused(
                DecisionKind.TOOL_QUESTION,
                ToolAnswerRefusal.INVALID,
                f"the answer does not fit the schema {question.tool} asked for: {problem}",
            )
    target = ToolQuestionState.ANSWERED if accept else ToolQuestionState.DECLINED
    decided = await store.settle(
        run_id, question_id, target, by=person.actor, content=dict(content or {}) if accept else None
    )
    if decided is None:  # decided, withdrawn or expired between the read and the update
        current = await store.get(run_id, question_id)
        late = current is not None and tool_answer_refusal(
            current.state, current.expires_at, now=datetime.now(UTC)
        )
        raise DecisionRefused(DecisionKind.TOOL_QUESTION, late or ToolAnswerRefusal.DECIDED)
    return decided

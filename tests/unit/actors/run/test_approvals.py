"""Whether a caller may decide what waits for a person is weighed as its decision would be: the kind's scope,
then the kind's own refusal (the run's own principal barred by its tenant's policy, a deadline passed)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from actors.run.approvals import REFUSALS, Admission, DecisionKind, DecisionRefused, decidable
from actors.store.operations import Operation
from actors.store.questions import Question
from actors.store.reviews import Review
from dag.contracts import Risk
from dag.operations import APPROVE_SCOPE, DecisionRefusal, OperationState
from dag.policy import Principal, TenantPolicy
from dag.questions import ANSWER_SCOPE, QuestionState
from dag.review import REVIEW_SCOPE, ReviewState
from tests.unit.actors.api.test_views import approved_at

NOW = datetime.now(UTC)
LATER = NOW + timedelta(hours=1)
RUN = "00000000-0000-4000-8000-000000000002"


def operation(
    state: OperationState = OperationState.AWAITING_APPROVAL, *, expires_at: datetime = LATER
) -> Operation:
    """An irreversible send of the run's own principal, ``requester``."""
    return replace(approved_at(NOW), state=state, expires_at=expires_at)


REVIEW = Review(
    run_id=RUN,
    round=1,
    tenant_id="tenant-demo",
    subject="requester",
    plan={"nodes": []},
    plan_hash="b" * 64,
    nodes=(),
    state=ReviewState.AWAITING,
    expires_at=LATER,
    decided_by=None,
    decided_at=None,
    note=None,
    created_at=NOW,
)
QUESTION = Question(
    run_id=RUN,
    number=1,
    round=1,
    tenant_id="tenant-demo",
    subject="requester",
    text="Which case?",
    state=QuestionState.AWAITING,
    expires_at=LATER,
    answer=None,
    answered_by=None,
    answered_at=None,
    created_at=NOW,
)
EVERY_SCOPE = frozenset({APPROVE_SCOPE, REVIEW_SCOPE, ANSWER_SCOPE})


def person(subject: str = "approver", scopes: frozenset[str] = EVERY_SCOPE) -> Principal:
    return Principal("tenant-demo", subject, scopes)


@pytest.mark.parametrize(
    ("row", "scope"),
    [
        (operation(), APPROVE_SCOPE),
        (operation(OperationState.UNKNOWN), APPROVE_SCOPE),
        (REVIEW, REVIEW_SCOPE),
        (QUESTION, ANSWER_SCOPE),
    ],
    ids=["approval", "resolution", "review", "question"],
)
def test_a_person_decides_what_its_kinds_scope_lets_it(
    row: Operation | Review | Question, scope: str
) -> None:
    assert decidable(row, person(scopes=frozenset({scope})), TenantPolicy())
    assert not decidable(row, person(scopes=EVERY_SCOPE - {scope}), TenantPolicy())


def test_the_runs_own_principal_decides_only_what_its_tenants_policy_lets_it() -> None:
    requester = person("requester")
    lenient = TenantPolicy(self_approval=frozenset({Risk.IRREVERSIBLE_WRITE}), self_review=True)

    assert [decidable(row, requester, TenantPolicy()) for row in (operation(), REVIEW, QUESTION)] == [
        False,
        False,
        True,  # an answer is never authority: the requester may give it
    ]
    assert [decidable(row, requester, lenient) for row in (operation(), REVIEW)] == [True, True]


def test_what_is_past_its_deadline_is_no_longer_decidable() -> None:
    assert not decidable(operation(expires_at=NOW - timedelta(seconds=1)), person(), TenantPolicy())


def test_a_refusal_carries_its_kind_code_status_and_detail() -> None:
    refused = DecisionRefused(DecisionKind.OPERATION, DecisionRefusal.HASH_MISMATCH)
    admission = DecisionRefused(DecisionKind.REVIEW, Admission.SCOPE_MISSING, "reviewing a plan needs it")

    assert (refused.kind, refused.code, refused.status) == ("operation", "operation-hash-mismatch", 409)
    assert refused.detail == REFUSALS[DecisionRefusal.HASH_MISMATCH][1]
    assert (admission.code, admission.status, admission.detail) == (
        "scope-missing",
        403,
        "reviewing a plan needs it",
    )
    assert DecisionKind.QUESTION.scope == ANSWER_SCOPE

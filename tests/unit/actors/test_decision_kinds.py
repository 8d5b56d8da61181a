"""A person's decision of any kind is refused with one type: its kind, code, HTTP status and detail."""

from __future__ import annotations

from actors.run.approvals import REFUSALS, Admission, DecisionKind, DecisionRefused
from dag.operations import DecisionRefusal
from dag.questions import ANSWER_SCOPE


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

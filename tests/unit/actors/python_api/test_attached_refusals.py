"""An attached session reads each refusal the API answers back into the supervisor's outcome, as an in-process
session raises it: every outcome that refuses a submission, from its problem type and members."""

from __future__ import annotations

import pytest

from actors.python_api.attached import refused_as
from actors.run.submission import Submission, SubmitResult

ERROR = {"message": "why", "resource_lacks": ["case_id"]}
"""What every refusal's message reads (the members they index rather than ``get``)."""
OWN_ERRORS = {Submission.UNKNOWN_PLANNER: {**ERROR, "planner": "nope", "known": ["outputs"]}}
"""The members that tell apart two outcomes of one problem type (a planner named and unknown; none named)."""
REFUSING = [
    outcome
    for outcome in Submission
    if SubmitResult(outcome, error=OWN_ERRORS.get(outcome, ERROR)).refusal() is not None
]


@pytest.mark.parametrize("outcome", REFUSING, ids=[outcome.value for outcome in REFUSING])
def test_each_refusal_the_api_answers_is_read_back_as_its_outcome(outcome: Submission) -> None:
    refusal = SubmitResult(outcome, error=OWN_ERRORS.get(outcome, ERROR)).refusal()
    assert refusal is not None

    read_back = refused_as(refusal.status, refusal.problem, refusal.fields)

    assert read_back is outcome, f"{refusal.problem!r} is not read back as {outcome.value}"

"""docs/API.md names every problem the API can answer with."""

from __future__ import annotations

import re

from tests.conftest import REPO
from tests.unit.test_readme import API

API_SOURCES = [*sorted((REPO / "actors" / "api").rglob("*.py")), REPO / "actors" / "run" / "submission.py"]
"""The routes, their problems and the request guard, the run viewer's routes included, and a refused
submission's problem (``SubmitResult.refusal``), which the API answers with."""


def test_every_problem_slug_the_api_raises_is_in_the_api_document() -> None:
    code = "\n".join(source.read_text(encoding="utf-8") for source in API_SOURCES)
    slugs = set(re.findall(r'(?:Problem|Refusal)\(\s*\d{3},\s*"([a-z-]+)"', code))
    slugs |= set(re.findall(r'"(body-too-[a-z]+)"', code))  # the request guard's refusals

    assert {
        "invalid-request",
        "supervisor-unavailable",
        "body-too-deep",
        "run-not-found",
        "not-ready",
    } <= slugs
    assert sorted(slug for slug in slugs if f"`{slug}`" not in API) == []


def test_every_refusal_of_a_persons_decision_has_a_status_and_is_in_the_api_document() -> None:
    """One table (``actors.run.approvals.REFUSALS``) gives every refusal of every kind of decision its status;
    each code is a problem type the API answers with."""
    from actors.run.approvals import REFUSALS, Admission
    from dag.operations import DecisionRefusal
    from dag.questions import AnswerRefusal
    from dag.review import ReviewRefusal
    from dag.tool_questions import ToolAnswerRefusal

    codes = [*Admission, *DecisionRefusal, *ReviewRefusal, *AnswerRefusal, *ToolAnswerRefusal]

    assert sorted(REFUSALS, key=str) == sorted(codes, key=str)
    assert {status for status, _ in REFUSALS.values()} == {403, 404, 409, 422}
    assert sorted(code.value for code in codes if f"`{code.value}`" not in API) == []

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

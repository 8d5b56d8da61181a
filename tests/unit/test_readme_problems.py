"""The README's HTTP API section names every problem the API can answer with."""

from __future__ import annotations

import re

from tests.conftest import REPO
from tests.unit.test_readme import section

API_SOURCES = [
    REPO / "actors" / "api" / "app.py",
    *sorted((REPO / "actors" / "api").glob("*.py")),
    *sorted((REPO / "actors" / "viewer").glob("*.py")),
]


def test_every_problem_slug_the_api_raises_is_in_the_readme() -> None:
    code = "\n".join(source.read_text(encoding="utf-8") for source in API_SOURCES)
    slugs = set(re.findall(r'Problem\(\s*\d{3},\s*"([a-z-]+)"', code))
    slugs |= set(re.findall(r'"(body-too-[a-z]+)"', code))  # the request guard's refusals
    http_api = section("HTTP API")

    assert {"invalid-request", "supervisor-unavailable", "body-too-deep", "run-not-found"} <= slugs
    assert sorted(slug for slug in slugs if f"`{slug}`" not in http_api) == []

"""``ToolHealth``: a circuit breaker per tool, driven here by explicit clock values."""

from __future__ import annotations

import pytest

from dag.events import ErrorKind
from dag.health import ToolHealth

TOOL = "caseops_get_case_snapshot"
OTHER = "caseops_get_policy_requirements"


def failing(times: int, *, kind: ErrorKind = ErrorKind.TRANSIENT, at: float = 0.0) -> ToolHealth:
    health = ToolHealth(threshold=3, cooloff_s=30.0)
    for _ in range(times):
        health.record(TOOL, kind, at)
    return health


def test_failures_below_the_threshold_keep_the_tool_in_service() -> None:
    assert failing(2).unhealthy(now=0.0) == frozenset()


@pytest.mark.parametrize("kind", [ErrorKind.TRANSIENT, ErrorKind.PROTOCOL])
def test_the_threshold_of_consecutive_failures_opens_the_circuit_for_that_tool_only(kind: ErrorKind) -> None:
    assert failing(3, kind=kind).unhealthy(now=0.0) == frozenset({TOOL})


@pytest.mark.parametrize("kind", [ErrorKind.BUSINESS, ErrorKind.AUTHORIZATION, ErrorKind.CONTRACT])
def test_failures_that_say_nothing_about_the_tools_health_never_open_it(kind: ErrorKind) -> None:
    assert failing(10, kind=kind).unhealthy(now=0.0) == frozenset()


def test_a_success_between_failures_resets_the_count() -> None:
    health = failing(2)
    health.record(TOOL, None, 1.0)
    health.record(TOOL, ErrorKind.TRANSIENT, 2.0)
    health.record(TOOL, ErrorKind.TRANSIENT, 3.0)

    assert health.unhealthy(now=3.0) == frozenset()


def test_an_open_circuit_stays_open_until_the_cool_off_ends() -> None:
    health = failing(3, at=100.0)

    assert health.unhealthy(now=129.9) == frozenset({TOOL})
    assert health.unhealthy(now=130.0) == frozenset()


def test_after_the_cool_off_one_success_closes_the_circuit() -> None:
    health = failing(3, at=100.0)

    health.record(TOOL, None, 131.0)

    assert health.unhealthy(now=131.0) == frozenset()
    health.record(TOOL, ErrorKind.TRANSIENT, 132.0)
    assert health.unhealthy(now=132.0) == frozenset()  # the count starts again from zero


def test_after_the_cool_off_one_more_failure_opens_it_for_another_cool_off() -> None:
    health = failing(3, at=100.0)

    health.record(TOOL, ErrorKind.TRANSIENT, 131.0)

    assert health.unhealthy(now=160.9) == frozenset({TOOL})
    assert health.unhealthy(now=161.0) == frozenset()


def test_each_tool_has_its_own_circuit() -> None:
    health = failing(3)
    health.record(OTHER, ErrorKind.TRANSIENT, 0.0)

    assert health.unhealthy(now=0.0) == frozenset({TOOL})

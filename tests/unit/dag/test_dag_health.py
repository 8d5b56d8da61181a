"""``ToolHealth``: a circuit breaker per tenant and tool, driven here by explicit clock values."""

from __future__ import annotations

import pytest

from dag.events import ErrorKind, NodeError, RuntimeFailure
from dag.health import Go, ToolHealth, WaitFor, counts_against_tool

KEY = ("tenant-a", "caseops_get_case_snapshot")
OTHER_TOOL = ("tenant-a", "caseops_get_policy_requirements")
OTHER_TENANT = ("tenant-b", "caseops_get_case_snapshot")


def error(kind: ErrorKind = ErrorKind.TRANSIENT, code: str = "HTTP_503") -> NodeError:
    return NodeError(kind=kind, code=code, message="x")


def failing(
    times: int, *, kind: ErrorKind = ErrorKind.TRANSIENT, code: str = "HTTP_503", at: float = 0.0
) -> ToolHealth:
    health = ToolHealth(threshold=3, first_cooloff_s=1.0, max_cooloff_s=8.0)
    for _ in range(times):
        health.record(KEY, error(kind, code), at)
    return health


def test_failures_below_the_threshold_keep_calls_going() -> None:
    health = failing(2)

    assert health.admit(KEY, 0.0) == Go()
    assert not health.is_open(KEY)


@pytest.mark.parametrize("kind", [ErrorKind.TRANSIENT, ErrorKind.PROTOCOL])
def test_the_threshold_of_consecutive_tool_failures_makes_calls_wait_for_the_cool_off(
    kind: ErrorKind,
) -> None:
    health = failing(3, kind=kind, at=100.0)

    assert health.admit(KEY, 100.25) == WaitFor(0.75)
    assert health.is_open(KEY)
    assert health.resting(100.5) == frozenset({KEY})


@pytest.mark.parametrize("kind", [ErrorKind.BUSINESS, ErrorKind.AUTHORIZATION, ErrorKind.CONTRACT])
def test_answers_and_refusals_say_nothing_about_the_tools_health(kind: ErrorKind) -> None:
    assert failing(10, kind=kind).admit(KEY, 0.0) == Go()


@pytest.mark.parametrize("code", [code.value for code in RuntimeFailure])
def test_raydags_own_failures_never_count_against_the_tool(code: str) -> None:
    assert not counts_against_tool(error(code=code))
    assert failing(10, code=code).admit(KEY, 0.0) == Go()


def test_a_circuit_is_per_tenant_and_tool() -> None:
    health = failing(3)

    assert health.admit(OTHER_TENANT, 0.0) == Go()
    assert health.admit(OTHER_TOOL, 0.0) == Go()
    assert isinstance(health.admit(KEY, 0.0), WaitFor)


def test_a_success_between_failures_resets_the_count() -> None:
    health = failing(2)
    health.record(KEY, None, 1.0)
    health.record(KEY, error(), 2.0)
    health.record(KEY, error(), 3.0)

    assert health.admit(KEY, 3.0) == Go()


def test_after_the_cool_off_one_call_probes_and_the_others_wait_for_it() -> None:
    health = failing(3, at=100.0)

    assert health.admit(KEY, 101.0) == Go(probe=True)
    assert health.admit(KEY, 101.0) == WaitFor(health.recheck_s)


def test_a_probe_that_succeeds_closes_the_circuit() -> None:
    health = failing(3, at=100.0)
    health.admit(KEY, 101.0)

    health.record(KEY, None, 101.1)

    assert health.admit(KEY, 101.1) == Go()
    assert not health.is_open(KEY)
    health.record(KEY, error(), 101.2)
    assert health.admit(KEY, 101.2) == Go()  # the count starts again from zero


def test_each_failed_probe_doubles_the_cool_off_up_to_its_ceiling() -> None:
    health = failing(3, at=0.0)
    opened_for = []
    clock = 0.0
    for _ in range(5):
        admission = health.admit(KEY, clock)
        assert isinstance(admission, WaitFor)
        opened_for.append(admission.seconds)
        clock += admission.seconds
        assert health.admit(KEY, clock) == Go(probe=True)
        health.record(KEY, error(), clock)

    assert opened_for == [1.0, 2.0, 4.0, 8.0, 8.0]


def test_a_released_probe_lets_the_next_call_probe() -> None:
    health = failing(3, at=0.0)
    assert health.admit(KEY, 1.0) == Go(probe=True)

    health.release(KEY)

    assert health.admit(KEY, 1.0) == Go(probe=True)


def test_a_probe_ended_by_raydags_own_failure_lets_another_call_probe_and_keeps_the_circuit() -> None:
    health = failing(3, at=0.0)
    health.admit(KEY, 1.0)

    health.record(KEY, error(code=RuntimeFailure.WORKER_FAILED), 1.0)

    assert health.admit(KEY, 1.0) == Go(probe=True)
    assert health.is_open(KEY)


def test_a_probe_that_never_reports_expires() -> None:
    health = failing(3, at=0.0)
    health.admit(KEY, 1.0)

    assert health.admit(KEY, 1.0 + health.probe_timeout_s - 0.1) == WaitFor(health.recheck_s)
    assert health.admit(KEY, 1.0 + health.probe_timeout_s) == Go(probe=True)


def test_calls_that_went_out_before_the_circuit_opened_do_not_lengthen_its_rest() -> None:
    health = failing(3, at=100.0)

    for _ in range(10):  # the rest of a fan-out, failing as it lands
        health.record(KEY, error(), 100.1)

    assert health.admit(KEY, 100.5) == WaitFor(0.5)
    assert health.admit(KEY, 101.0) == Go(probe=True)

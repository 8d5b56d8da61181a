"""Per-tenant admission: a token bucket for the rate, a cap on requests in flight, tenants apart."""

from __future__ import annotations

import pytest

from mcp_server.limits import Admission, Refused, TenantLimits


def test_a_burst_is_admitted_then_the_rate_holds() -> None:
    admission = Admission(TenantLimits(max_in_flight=100, rate_per_s=2, burst=3))
    decisions = []
    for _ in range(4):
        decisions.append(admission.enter("a", now=10.0))
        admission.leave("a")

    assert decisions == [None, None, None, Refused("rate", 1)]
    assert admission.enter("a", now=10.5) is None  # half a second refills one request at 2/s


def test_retry_after_is_the_whole_seconds_until_a_request_fits() -> None:
    admission = Admission(TenantLimits(rate_per_s=0.25, burst=1))
    admission.enter("a", now=0.0)
    admission.leave("a")

    assert admission.enter("a", now=1.0) == Refused("rate", 3)


def test_requests_in_flight_are_capped_and_freed_on_leave() -> None:
    admission = Admission(TenantLimits(max_in_flight=2))

    assert admission.enter("a", now=0.0) is None
    assert admission.enter("a", now=0.0) is None
    assert admission.enter("a", now=0.0) == Refused("concurrency", 1)
    admission.leave("a")
    assert admission.enter("a", now=0.0) is None
    assert admission.in_flight("a") == 2


def test_tenants_do_not_share_limits() -> None:
    admission = Admission(TenantLimits(max_in_flight=1, burst=1, rate_per_s=1))

    assert admission.enter("a", now=0.0) is None
    assert admission.enter("b", now=0.0) is None
    assert admission.enter("a", now=0.0) == Refused("concurrency", 1)


def test_a_refused_request_takes_nothing_from_the_bucket() -> None:
    admission = Admission(TenantLimits(max_in_flight=1, rate_per_s=1, burst=2))
    admission.enter("a", now=0.0)
    for _ in range(5):
        assert admission.enter("a", now=0.0) == Refused("concurrency", 1)
    admission.leave("a")

    assert admission.enter("a", now=0.0) is None


@pytest.mark.parametrize("limits", [{"max_in_flight": 0}, {"rate_per_s": 0}, {"burst": 0}])
def test_limits_must_be_positive(limits: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive"):
        TenantLimits(**limits)  # type: ignore[arg-type]

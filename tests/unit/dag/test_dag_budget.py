"""``Budgets``: hard limits a request may ask for up to the server's, defaults for what it does not ask, and the
checks that enforce them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from dag_run_builders import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dag.budget import (
    STOP_REASON_OF_BUDGET,
    BudgetAboveLimit,
    BudgetRequest,
    Budgets,
    RequestBound,
    WaitKind,
)
from dag.errors import BudgetExceeded
from dag.states import StopReason

SERVER = Budgets(
    max_nodes=64,
    max_fanout=32,
    max_replans=2,
    max_parallel=16,
    deadline_s=120.0,
    repeat_limit=3,
    max_stale_replans=1,
)
LIMITS = {name: getattr(SERVER, name) for name in Budgets.model_fields}


@st.composite
def requests_within(draw: st.DrawFn, server: Budgets) -> dict[str, Any]:
    """A request sending some budgets, each at most the server's limit (and within its lower bound)."""
    floors = {"max_nodes": 1, "max_fanout": 0, "max_replans": 0, "max_parallel": 1, "repeat_limit": 1}
    sent: dict[str, Any] = {}
    for name in Budgets.model_fields:
        if not draw(st.booleans()):
            continue
        limit = getattr(server, name)
        if isinstance(limit, float):
            sent[name] = draw(st.floats(min_value=0.001, max_value=limit))
        else:
            sent[name] = draw(st.integers(min_value=floors.get(name, 0), max_value=limit))
    return sent


@PROPERTY_SETTINGS
@given(sent=requests_within(SERVER))
def test_granted_takes_each_budget_sent_and_keeps_the_server_limit_for_the_rest(
    sent: dict[str, Any],
) -> None:
    effective = SERVER.granted(BudgetRequest(**sent))

    assert effective.model_dump() == {**LIMITS, **sent}


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_request_above_any_one_limit_is_refused_naming_it(name: str) -> None:
    above = LIMITS[name] * 2  # every server limit here is positive

    with pytest.raises(BudgetAboveLimit) as caught:
        SERVER.granted(BudgetRequest(**{name: above}))

    assert caught.value.above == {name: (above, LIMITS[name])}
    assert name in str(caught.value)


def test_a_request_equal_to_every_limit_is_accepted_unchanged() -> None:
    assert SERVER.granted(BudgetRequest(**LIMITS)) == SERVER


def test_no_request_keeps_the_servers_limits() -> None:
    assert SERVER.granted(None) == SERVER


def test_an_empty_request_keeps_the_servers_limits() -> None:
    assert SERVER.granted(BudgetRequest()) == SERVER


def test_what_a_request_does_not_ask_for_is_the_default_and_what_it_asks_may_reach_the_limit() -> None:
    limits = Budgets(deadline_s=3_600, approval_wait_s=30 * 86_400)
    defaults = Budgets(deadline_s=120, max_nodes=500)  # a default above its limit is the limit

    granted = limits.granted(BudgetRequest(deadline_s=600), defaults=defaults)

    assert granted.deadline_s == 600  # above the default, within the limit
    assert granted.max_nodes == limits.max_nodes
    assert granted.approval_wait_s == defaults.approval_wait_s
    assert limits.granted(None, defaults=defaults).deadline_s == 120
    with pytest.raises(BudgetAboveLimit):
        limits.granted(BudgetRequest(deadline_s=3_601), defaults=defaults)


def test_the_deadline_counts_the_runs_own_work_only() -> None:
    budgets = Budgets(deadline_s=10)

    budgets.check_deadline(active_s=9.999)
    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_deadline(active_s=10)

    assert (caught.value.budget, caught.value.limit) == ("deadline_s", 10)


def test_each_kind_of_wait_has_a_budget_of_its_own() -> None:
    budgets = Budgets(approval_wait_s=1, review_wait_s=2, question_wait_s=3, resolution_wait_s=4)

    assert [budgets.wait_s(kind) for kind in WaitKind] == [1, 2, 3, 4]
    assert Budgets().wait_s(WaitKind.APPROVAL) == 86_400  # a day, by default


@pytest.mark.parametrize(
    "fields",
    [
        {"max_nodes": 0},
        {"max_nodes": 10_001},
        {"max_fanout": -1},
        {"max_fanout": 10_001},
        {"max_replans": 21},
        {"max_parallel": 0},
        {"deadline_s": 0},
        {"deadline_s": 86_401},
        {"approval_wait_s": 0},
        {"approval_wait_s": 30 * 86_400 + 1},
        {"repeat_limit": 0},
        {"max_stale_replans": -1},
        {"x": 1},
    ],
)
def test_budgets_outside_their_bounds_cannot_be_built(fields: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Budgets.model_validate(fields)


@pytest.mark.parametrize("fields", [{"max_nodes": 0}, {"max_parallel": 0}, {"deadline_s": 0}, {"x": 1}])
def test_requests_outside_their_bounds_cannot_be_built(fields: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        BudgetRequest.model_validate(fields)


def test_an_expansion_within_both_limits_passes() -> None:
    Budgets(max_nodes=10, max_fanout=4).check_expansion(nodes=6, fanout=4)


def test_an_expansion_wider_than_max_fanout_names_max_fanout() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        Budgets(max_nodes=100, max_fanout=4).check_expansion(nodes=0, fanout=5)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_fanout", 5, 4)


def test_an_expansion_past_max_nodes_names_max_nodes() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        Budgets(max_nodes=10, max_fanout=4).check_expansion(nodes=7, fanout=4)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_nodes", 11, 10)


def test_a_replan_that_fits_max_nodes_passes_and_one_past_it_names_max_nodes() -> None:
    budgets = Budgets(max_nodes=10)
    budgets.check_plan_size(nodes=7, added=3)

    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_plan_size(nodes=7, added=4)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_nodes", 11, 10)


def test_replans_up_to_max_replans_pass_and_one_more_names_max_replans() -> None:
    budgets = Budgets(max_replans=2)
    budgets.check_replan(replans=2)

    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_replan(replans=3)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_replans", 3, 2)


def test_stale_rounds_up_to_the_limit_pass_and_one_more_names_max_stale_replans() -> None:
    budgets = Budgets(max_stale_replans=1)
    budgets.check_stale(stale_replans=1)

    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_stale(stale_replans=2)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_stale_replans", 2, 1)


def test_proposals_up_to_repeat_limit_pass_and_one_more_names_repeat_limit() -> None:
    budgets = Budgets(repeat_limit=3)
    budgets.check_repeat(proposals=3)

    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_repeat(proposals=4)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("repeat_limit", 4, 3)


def test_each_budget_stops_the_run_with_its_own_reason() -> None:
    assert STOP_REASON_OF_BUDGET == {
        "max_nodes": StopReason.NODE_BUDGET_EXHAUSTED,
        "max_fanout": StopReason.FANOUT_LIMIT,
        "max_replans": StopReason.REPLAN_LIMIT,
        "deadline_s": StopReason.DEADLINE_EXCEEDED,
        "repeat_limit": StopReason.REPEATED_ACTION_FINGERPRINT,
        "max_stale_replans": StopReason.NO_NEW_EVIDENCE,
        "max_tokens": StopReason.TOKEN_BUDGET_EXHAUSTED,
        "max_cost_usd": StopReason.COST_BUDGET_EXHAUSTED,
        "max_questions": StopReason.QUESTION_LIMIT,
        "approval_wait_s": StopReason.APPROVAL_EXPIRED,
        "review_wait_s": StopReason.REVIEW_EXPIRED,
        "question_wait_s": StopReason.QUESTION_EXPIRED,
        "resolution_wait_s": StopReason.RESOLUTION_EXPIRED,
    }


def test_every_limit_that_can_stop_a_run_has_a_stop_reason() -> None:
    # max_parallel only queues calls; every other budget ends the run when it runs out.
    assert set(STOP_REASON_OF_BUDGET) == set(Budgets.model_fields) - {"max_parallel"}


def test_a_question_past_the_budget_names_it() -> None:
    budgets = Budgets(max_questions=1)

    budgets.check_questions(asked=1)
    with pytest.raises(BudgetExceeded) as caught:
        budgets.check_questions(asked=2)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_questions", 2, 1)


def test_model_usage_beyond_either_budget_names_it() -> None:
    budgets = Budgets(max_tokens=100, max_cost_usd=0.5)

    budgets.check_usage(tokens=100, cost_usd=0.5)
    with pytest.raises(BudgetExceeded) as tokens:
        budgets.check_usage(tokens=101, cost_usd=0.0)
    with pytest.raises(BudgetExceeded) as cost:
        budgets.check_usage(tokens=0, cost_usd=0.51)

    assert (tokens.value.budget, cost.value.budget) == ("max_tokens", "max_cost_usd")


def test_a_request_whose_worst_case_would_pass_either_budget_may_not_be_made() -> None:
    budgets = Budgets(max_tokens=100, max_cost_usd=0.5)
    request = RequestBound("gpt-test", input_tokens=30, output_tokens=20, cost_usd=0.2)

    budgets.check_before_request(tokens=50, cost_usd=0.3, request=request)  # exactly at both limits
    with pytest.raises(BudgetExceeded) as tokens:
        budgets.check_before_request(tokens=51, cost_usd=0.0, request=request)
    with pytest.raises(BudgetExceeded) as cost:
        budgets.check_before_request(tokens=0, cost_usd=0.31, request=request)

    assert (tokens.value.budget, tokens.value.used, tokens.value.limit) == ("max_tokens", 101, 100)
    assert (cost.value.budget, cost.value.used) == ("max_cost_usd", 0.51)


def test_the_deadline_is_reached_at_deadline_s_after_the_start_not_before() -> None:
    started = datetime(2026, 1, 1, tzinfo=UTC)
    budgets = Budgets(deadline_s=2.5)

    assert budgets.deadline_of(started) == started + timedelta(seconds=2.5)
    budgets.check_deadline(active_s=2.499)
    with pytest.raises(BudgetExceeded) as late:
        budgets.check_deadline(active_s=2.5)

    assert (late.value.budget, late.value.used, late.value.limit) == ("deadline_s", 2.5, 2.5)


def test_calls_may_start_while_fewer_than_max_parallel_are_out() -> None:
    budgets = Budgets(max_parallel=4)

    assert [budgets.calls_room(in_flight=n) for n in (0, 3, 4)] == [4, 1, 0]


def test_a_run_may_gain_nodes_up_to_max_nodes() -> None:
    assert [Budgets(max_nodes=10).nodes_left(nodes=n) for n in (0, 7, 10)] == [10, 3, 0]

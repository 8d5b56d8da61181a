"""``Budgets``: hard limits a request may lower but never raise, and the expansion check that enforces them."""

from __future__ import annotations

import pytest
from dag_run_builders import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from dag.budget import STOP_REASON_OF_BUDGET, Budgets
from dag.errors import BudgetExceeded
from dag.states import StopReason

budgets = st.builds(
    Budgets, max_nodes=st.integers(min_value=1, max_value=10_000), max_fanout=st.integers(0, 10_000)
)


@PROPERTY_SETTINGS
@given(server=budgets, requested=budgets)
def test_lowered_by_never_raises_a_limit(server: Budgets, requested: Budgets) -> None:
    effective = server.lowered_by(requested)

    assert effective.max_nodes == min(server.max_nodes, requested.max_nodes)
    assert effective.max_fanout == min(server.max_fanout, requested.max_fanout)


def test_a_request_asking_for_more_gets_the_servers_limits() -> None:
    server = Budgets(max_nodes=64, max_fanout=32)

    assert server.lowered_by(Budgets(max_nodes=10_000, max_fanout=10_000)) == server


def test_no_request_keeps_the_servers_limits() -> None:
    server = Budgets(max_nodes=10, max_fanout=5)

    assert server.lowered_by(None) == server


@pytest.mark.parametrize(
    "fields", [{"max_nodes": 0}, {"max_nodes": 10_001}, {"max_fanout": -1}, {"max_fanout": 10_001}, {"x": 1}]
)
def test_budgets_outside_their_bounds_cannot_be_built(fields: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        Budgets.model_validate(fields)


def test_an_expansion_within_both_limits_passes() -> None:
    Budgets(max_nodes=10, max_fanout=4).check_expansion(executable_nodes=6, fanout=4)


def test_an_expansion_wider_than_max_fanout_names_max_fanout() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        Budgets(max_nodes=100, max_fanout=4).check_expansion(executable_nodes=0, fanout=5)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_fanout", 5, 4)


def test_an_expansion_past_max_nodes_names_max_nodes() -> None:
    with pytest.raises(BudgetExceeded) as caught:
        Budgets(max_nodes=10, max_fanout=4).check_expansion(executable_nodes=7, fanout=4)

    assert (caught.value.budget, caught.value.used, caught.value.limit) == ("max_nodes", 11, 10)


def test_each_budget_stops_the_run_with_its_own_reason() -> None:
    assert STOP_REASON_OF_BUDGET == {
        "max_nodes": StopReason.NODE_BUDGET_EXHAUSTED,
        "max_fanout": StopReason.FANOUT_LIMIT,
    }

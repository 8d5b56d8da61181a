"""``Plan.parse``: untrusted JSON becomes a plan or a ``MALFORMED_PLAN`` error naming the spot."""

from __future__ import annotations

from typing import Any

import pytest

from dag.errors import PlanErrorCode, PlanInvalid
from dag.plan import Plan
from dag.refs import ITEM_KEY


def test_the_example_plan_parses_into_four_nodes_in_order(example_plan: dict[str, Any]) -> None:
    plan = Plan.parse(example_plan)

    assert [node.id for node in plan.nodes] == ["case", "policy", "docs", "resolve"]
    resolve = plan.node("resolve")
    assert resolve.for_each is not None
    assert (resolve.for_each.ref, resolve.for_each.pointer) == ("docs", "/documents")
    assert resolve.args["document_id"] == {ITEM_KEY: "/document_id"}


def test_the_example_plan_survives_a_json_round_trip(example_plan: dict[str, Any]) -> None:
    plan = Plan.parse(example_plan)

    assert plan.to_json() == example_plan
    assert Plan.parse(plan.to_json()) == plan


def test_dependencies_list_the_for_each_source_then_references_then_after() -> None:
    plan = Plan.parse(
        {
            "nodes": [
                {
                    "id": "x",
                    "tool": "t",
                    "for_each": {"$ref": "a"},
                    "args": {"p": {"$ref": "b"}, "q": [{"$ref": "a"}, {"$item": ""}]},
                    "after": ["c", "b"],
                }
            ]
        }
    )

    assert plan.nodes[0].dependencies == ("a", "b", "c")


@pytest.mark.parametrize(
    ("data", "location"),
    [
        pytest.param({"nodes": 5}, "/nodes", id="nodes-a-number"),
        pytest.param({"nodes": {"id": "a", "tool": "t"}}, "/nodes", id="nodes-an-object"),
        pytest.param({"nodes": "case"}, "/nodes", id="nodes-a-string"),
        pytest.param({}, "/nodes", id="nodes-missing"),
        pytest.param({"nodes": [], "tenant_id": "t-1"}, "/tenant_id", id="unknown-top-level-key"),
        pytest.param(
            {"nodes": [{"id": "a", "tool": "t", "scope": "cases:read"}]},
            "/nodes/0/scope",
            id="unknown-node-key",
        ),
        pytest.param({"nodes": [{"id": "a", "tool": "t", "args": [1]}]}, "/nodes/0/args", id="args-a-list"),
        pytest.param({"nodes": [{"id": "a", "tool": "t", "args": "x"}]}, "/nodes/0/args", id="args-a-string"),
        pytest.param(
            {"nodes": [{"id": "a", "tool": "t", "for_each": {"pointer": "/documents"}}]},
            "/nodes/0/for_each/$ref",
            id="for-each-without-ref",
        ),
        pytest.param(
            {"nodes": [{"id": "a", "tool": "t", "for_each": {"$ref": "b", "limit": 3}}]},
            "/nodes/0/for_each/limit",
            id="for-each-unknown-key",
        ),
        pytest.param({"nodes": [{"id": "a"}]}, "/nodes/0", id="tool-and-agent-missing"),
        pytest.param({"nodes": [{"id": 7, "tool": "t"}]}, "/nodes/0/id", id="id-not-a-string"),
        pytest.param(
            {"nodes": [{"id": "a", "tool": "t", "after": "b"}]}, "/nodes/0/after", id="after-a-string"
        ),
        pytest.param(["case"], "/", id="plan-a-list"),
        pytest.param(None, "/", id="plan-null"),
    ],
)
def test_a_malformed_plan_raises_malformed_plan_at_its_location(data: Any, location: str) -> None:
    with pytest.raises(PlanInvalid) as caught:
        Plan.parse(data)

    assert caught.value.code is PlanErrorCode.MALFORMED_PLAN
    assert caught.value.location == location
    assert location in caught.value.message
    assert caught.value.as_dict()["code"] == "MALFORMED_PLAN"


def test_a_malformed_plan_error_hides_the_pydantic_cause() -> None:
    with pytest.raises(PlanInvalid) as caught:
        Plan.parse({"nodes": 5})

    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ is True


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_numbers_in_args_are_malformed(number: float) -> None:
    data = {"nodes": [{"id": "a", "tool": "t", "args": {"x": [1, {"y": number}]}}]}

    with pytest.raises(PlanInvalid) as caught:
        Plan.parse(data)

    assert caught.value.code is PlanErrorCode.MALFORMED_PLAN
    assert caught.value.location == "/nodes/0/args"

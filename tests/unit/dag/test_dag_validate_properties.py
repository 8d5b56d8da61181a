"""Property tests of plan validation: any input is a plan or a ``PlanInvalid``, and accepted plans are DAGs."""

from __future__ import annotations

from typing import Any

from dag_run_builders import PROPERTY_SETTINGS, RESOLVE_TOOL
from hypothesis import given
from hypothesis import strategies as st

from dag.errors import PlanErrorCode, PlanInvalid
from dag.plan import NODE_ID_PATTERN, Plan
from dag.validate import validate_plan
from mcp_server.contracts import CASEOPS_CHECKS

TOOLS = sorted(CASEOPS_CHECKS)
REFERENCE_CODES = {
    PlanErrorCode.SELF_REFERENCE,
    PlanErrorCode.FORWARD_REFERENCE,
    PlanErrorCode.UNKNOWN_REFERENCE,
}

# Anything a confused or hostile planner might write: few ids, so references often hit; some ids invalid.
VALID_IDS = ["a", "b", "c", "case", "docs"]
INVALID_IDS = ["A", "", "a b", "docs[0]", "x" * 70, "ケース"]
node_ids = st.sampled_from(VALID_IDS * 8 + INVALID_IDS)
pointers = st.sampled_from(["", "/case_id", "/documents", "/documents/0/document_id", "/-", "x", "/~2"])
literals = (
    st.sampled_from(["C-102", "D-1", "", "bad id", "a" * 80]) | st.integers() | st.none() | st.booleans()
)
references = st.builds(
    lambda node, pointer: {"$ref": node, "pointer": pointer}, node_ids, pointers
) | st.builds(lambda pointer: {"$item": pointer}, pointers)
malformed_references = st.sampled_from(
    [
        {"$ref": 1},
        {"$ref": "a", "extra": 1},
        {"$item": "", "$ref": "a"},
        {"$item": 3},
        {"$ref": "a", "pointer": 7},
    ]
)
arg_values = st.recursive(
    literals | references | malformed_references,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["k", "$ref", "$item"]), inner, max_size=2)
    ),
    max_leaves=4,
)
arg_keys = st.sampled_from(["case_id", "document_id", "tenant_id", "limit"])
for_each_specs = st.none() | st.fixed_dictionaries({"$ref": node_ids}, optional={"pointer": pointers})
raw_nodes = st.fixed_dictionaries(
    {"id": node_ids, "tool": st.sampled_from([*TOOLS, "caseops_delete_case"])},
    optional={
        "args": st.dictionaries(arg_keys, arg_values, max_size=3),
        "for_each": for_each_specs,
        "after": st.lists(node_ids, max_size=2),
    },
)
raw_plans = st.fixed_dictionaries({"nodes": st.lists(raw_nodes, max_size=6)})


def assert_only_earlier_references(plan: Plan) -> None:
    earlier: set[str] = set()
    for node in plan.nodes:
        assert NODE_ID_PATTERN.fullmatch(node.id)
        assert node.id not in earlier
        assert node.tool in CASEOPS_CHECKS
        assert set(node.dependencies) <= earlier, f"{node.id} depends on a node not listed before it"
        earlier.add(node.id)


def outcome(data: dict[str, Any], *, max_nodes: int) -> Plan | PlanInvalid:
    """The validated plan, or the rejection; any other exception escapes and fails the test."""
    try:
        return validate_plan(Plan.parse(data), CASEOPS_CHECKS, max_nodes=max_nodes)
    except PlanInvalid as rejection:
        return rejection


@PROPERTY_SETTINGS
@given(data=raw_plans)
def test_any_plan_is_accepted_as_is_or_rejected_with_plan_invalid(data: dict[str, Any]) -> None:
    result = outcome(data, max_nodes=6)

    if isinstance(result, PlanInvalid):
        assert result.code in PlanErrorCode
        assert result.location is not None
    else:
        assert result == Plan.parse(data)
        assert_only_earlier_references(result)


@st.composite
def well_formed_plans(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """A plan of ids n0..n{k-1} whose only possible flaw is a reference that is not to an earlier node.

    Returns the plan and whether every dependency points backwards (the oracle for acceptance).
    """
    size = draw(st.integers(min_value=1, max_value=6))
    backwards_only = True

    def target(index: int) -> str:
        nonlocal backwards_only
        if index > 0 and draw(st.integers(min_value=0, max_value=9)) > 0:  # mostly an earlier node
            return f"n{draw(st.integers(min_value=0, max_value=index - 1))}"
        backwards_only = False
        return f"n{draw(st.integers(min_value=index, max_value=size))}"  # itself, later, or n{size}: absent

    def value(index: int) -> Any:
        if index == 0 or draw(st.booleans()):  # n0 has no earlier node to refer to
            return draw(st.sampled_from(["C-102", "D-1", "doc.7:b"]))
        return {"$ref": target(index), "pointer": draw(st.sampled_from(["", "/case_id", "/documents/0/id"]))}

    nodes = []
    for index in range(size):
        tool = draw(st.sampled_from(TOOLS))
        node: dict[str, Any] = {"id": f"n{index}", "tool": tool, "args": {"case_id": value(index)}}
        if tool == RESOLVE_TOOL:
            if index > 0 and draw(st.booleans()):
                node["for_each"] = {"$ref": target(index), "pointer": "/documents"}
                node["args"]["document_id"] = {"$item": "/document_id"}
            else:
                node["args"]["document_id"] = value(index)
        after_count = draw(st.integers(min_value=0, max_value=2 if index > 0 else 0))
        node["after"] = [target(index) for _ in range(after_count)]
        nodes.append(node)
    return {"nodes": nodes}, backwards_only


@PROPERTY_SETTINGS
@given(case=well_formed_plans())
def test_a_well_formed_plan_is_accepted_exactly_when_it_only_references_earlier_nodes(
    case: tuple[dict[str, Any], bool],
) -> None:
    data, backwards_only = case

    result = outcome(data, max_nodes=6)

    if backwards_only:
        assert isinstance(result, Plan), result.as_dict()
        assert_only_earlier_references(result)
    else:
        assert isinstance(result, PlanInvalid), (
            "a reference to itself, a later or an unknown node was accepted"
        )
        assert result.code in REFERENCE_CODES

"""``validate_plan`` against the caseops catalogue: one rejection per error code, each naming node and spot."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dag_run_builders import CASE_ID, CASE_TOOL, DOCUMENTS_TOOL, RESOLVE_TOOL

from dag.contracts import ToolCatalogue
from dag.errors import PlanErrorCode, PlanInvalid
from dag.plan import Plan, PlanNode
from dag.validate import FORBIDDEN_ARGUMENT_KEYS, check_arguments, validate_plan
from mcp_server.contracts import CASEOPS_TOOLS


def node(node_id: str, tool: str = CASE_TOOL, **fields: Any) -> dict[str, Any]:
    fields.setdefault("args", {"case_id": CASE_ID})
    return {"id": node_id, "tool": tool, **fields}


def resolve_node(node_id: str, document_id: Any, **fields: Any) -> dict[str, Any]:
    return node(node_id, RESOLVE_TOOL, args={"case_id": CASE_ID, "document_id": document_id}, **fields)


def rejection(*nodes: dict[str, Any], max_nodes: int = 64) -> PlanInvalid:
    plan = Plan.parse({"nodes": list(nodes)})
    with pytest.raises(PlanInvalid) as caught:
        validate_plan(plan, CASEOPS_TOOLS, max_nodes=max_nodes)
    return caught.value


def where(error: PlanInvalid) -> tuple[PlanErrorCode, str | None, str | None]:
    return error.code, error.node_id, error.location


def test_the_example_plan_is_returned_unchanged(
    example_plan: dict[str, Any], catalogue: ToolCatalogue
) -> None:
    plan = Plan.parse(example_plan)

    assert validate_plan(plan, catalogue, max_nodes=4) is plan


def test_an_empty_plan_is_rejected() -> None:
    assert where(rejection()) == (PlanErrorCode.EMPTY_PLAN, None, "/nodes")


def test_a_plan_longer_than_max_nodes_is_rejected() -> None:
    error = rejection(node("a"), node("b"), node("c"), max_nodes=2)

    assert where(error) == (PlanErrorCode.TOO_MANY_NODES, None, "/nodes")
    assert "3 nodes" in error.message


def test_a_plan_exactly_max_nodes_long_is_accepted() -> None:
    plan = Plan.parse({"nodes": [node("a"), node("b")]})

    assert validate_plan(plan, CASEOPS_TOOLS, max_nodes=2) is plan


class CountedNodes(tuple[PlanNode, ...]):
    """A plan's nodes that count how many times validation reads one of them."""

    reads = 0

    def __iter__(self) -> Iterator[PlanNode]:
        for plan_node in super().__iter__():
            self.reads += 1
            yield plan_node

    def __getitem__(self, index: Any) -> Any:
        self.reads += 1
        return super().__getitem__(index)


def test_a_ten_thousand_node_plan_is_rejected_by_its_size_before_any_node_is_read() -> None:
    # Node 0 names an unknown tool: had validation walked the nodes first, it would report UNKNOWN_TOOL.
    nodes = [node("n0", tool="caseops_delete_case")] + [
        node(f"n{index}", args={"case_id": {"$ref": f"n{index - 1}", "pointer": "/case_id"}})
        for index in range(1, 10_000)
    ]
    parsed = Plan.parse({"nodes": nodes})
    counted = CountedNodes(parsed.nodes)

    with pytest.raises(PlanInvalid) as caught:
        validate_plan(parsed.model_copy(update={"nodes": counted}), CASEOPS_TOOLS, max_nodes=64)

    assert where(caught.value) == (PlanErrorCode.TOO_MANY_NODES, None, "/nodes")
    assert counted.reads == 0  # the cost does not grow with the plan: not even the ids were collected


@pytest.mark.parametrize("bad_id", ["Case", "", "-case", "case.1", "case[0]", "a" * 65, "case\n"])
def test_a_node_id_outside_the_pattern_is_rejected(bad_id: str) -> None:
    error = rejection(node("case"), node(bad_id))

    # The id itself is untrusted and may be huge, so it is not echoed as node_id.
    assert where(error) == (PlanErrorCode.INVALID_NODE_ID, None, "/nodes/1/id")


def test_a_duplicate_node_id_is_rejected_at_its_second_use() -> None:
    error = rejection(node("case"), node("docs", DOCUMENTS_TOOL), node("case"))

    assert where(error) == (PlanErrorCode.DUPLICATE_NODE_ID, "case", "/nodes/2/id")


def test_a_tool_outside_the_catalogue_is_rejected() -> None:
    error = rejection(node("case"), node("wipe", "caseops_delete_case"))

    assert where(error) == (PlanErrorCode.UNKNOWN_TOOL, "wipe", "/nodes/1/tool")


@pytest.mark.parametrize(
    "reference",
    [
        pytest.param({"$ref": "case", "pointer": "/case_id", "default": "C-1"}, id="extra-key"),
        pytest.param({"$ref": 3}, id="ref-not-a-string"),
        pytest.param({"$item": "/document_id", "pointer": ""}, id="item-with-extra-key"),
    ],
)
def test_a_malformed_reference_is_rejected_at_its_argument(reference: dict[str, Any]) -> None:
    error = rejection(node("case"), resolve_node("resolve", reference))

    assert where(error) == (PlanErrorCode.MALFORMED_REFERENCE, "resolve", "/nodes/1/args/document_id")


def test_a_node_referring_to_itself_is_rejected() -> None:
    error = rejection(node("case", args={"case_id": {"$ref": "case", "pointer": "/case_id"}}))

    assert where(error) == (PlanErrorCode.SELF_REFERENCE, "case", "/nodes/0/args/case_id")


def test_a_reference_to_a_later_node_is_rejected() -> None:
    error = rejection(
        node("case"),
        resolve_node("resolve", {"$ref": "docs", "pointer": "/documents/0/document_id"}),
        node("docs", DOCUMENTS_TOOL),
    )

    assert where(error) == (PlanErrorCode.FORWARD_REFERENCE, "resolve", "/nodes/1/args/document_id")


def test_a_reference_to_a_node_not_in_the_plan_is_rejected() -> None:
    error = rejection(node("case"), resolve_node("resolve", {"$ref": "ghost", "pointer": "/id"}))

    assert where(error) == (PlanErrorCode.UNKNOWN_REFERENCE, "resolve", "/nodes/1/args/document_id")


def test_a_reference_deep_inside_a_list_is_located_by_its_full_path() -> None:
    nested = {"case_id": CASE_ID, "document_id": "D-1", "extra": [0, {"k": {"$ref": "ghost"}}]}
    error = rejection(node("case"), node("resolve", RESOLVE_TOOL, args=nested))

    assert where(error) == (PlanErrorCode.UNKNOWN_REFERENCE, "resolve", "/nodes/1/args/extra/1/k")


@pytest.mark.parametrize("pointer", ["document_id", "/documents/~2", "/a~"])
def test_a_reference_pointer_that_is_not_a_json_pointer_is_rejected(pointer: str) -> None:
    error = rejection(
        node("docs", DOCUMENTS_TOOL), resolve_node("resolve", {"$ref": "docs", "pointer": pointer})
    )

    assert where(error) == (PlanErrorCode.INVALID_POINTER, "resolve", "/nodes/1/args/document_id")


def test_a_reference_pointer_that_is_not_a_string_is_rejected() -> None:
    error = rejection(node("docs", DOCUMENTS_TOOL), resolve_node("resolve", {"$ref": "docs", "pointer": 0}))

    assert where(error) == (PlanErrorCode.INVALID_POINTER, "resolve", "/nodes/1/args/document_id")


def test_a_for_each_pointer_that_is_not_a_json_pointer_is_rejected() -> None:
    error = rejection(
        node("docs", DOCUMENTS_TOOL),
        resolve_node("resolve", {"$item": "/document_id"}, for_each={"$ref": "docs", "pointer": "documents"}),
    )

    assert where(error) == (PlanErrorCode.INVALID_POINTER, "resolve", "/nodes/1/for_each/pointer")


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("resolve", PlanErrorCode.SELF_REFERENCE),
        ("later", PlanErrorCode.FORWARD_REFERENCE),
        ("ghost", PlanErrorCode.UNKNOWN_REFERENCE),
    ],
)
def test_a_for_each_source_is_checked_like_a_reference(source: str, code: PlanErrorCode) -> None:
    error = rejection(
        node("docs", DOCUMENTS_TOOL),
        resolve_node(
            "resolve", {"$item": "/document_id"}, for_each={"$ref": source, "pointer": "/documents"}
        ),
        node("later", DOCUMENTS_TOOL),
    )

    assert where(error) == (code, "resolve", "/nodes/1/for_each")


def test_an_item_reference_outside_for_each_is_rejected() -> None:
    error = rejection(node("docs", DOCUMENTS_TOOL), resolve_node("resolve", {"$item": "/document_id"}))

    assert where(error) == (PlanErrorCode.ITEM_OUTSIDE_FOR_EACH, "resolve", "/nodes/1/args/document_id")


def test_a_static_argument_violating_the_schema_pattern_is_rejected() -> None:
    error = rejection(node("case"), node("policy", args={"case_id": "C 102; DROP"}))

    assert where(error) == (PlanErrorCode.INVALID_ARGUMENTS, "policy", "/nodes/1/args/case_id")
    assert "does not match" in error.message


def test_an_extra_argument_the_tool_does_not_take_is_rejected() -> None:
    error = rejection(node("case", args={"case_id": CASE_ID, "priority": "high"}))

    assert where(error) == (PlanErrorCode.INVALID_ARGUMENTS, "case", "/nodes/0/args")
    assert "priority" in error.message


def test_a_tenant_id_argument_is_rejected_as_forbidden_not_merely_as_extra() -> None:
    error = rejection(node("case", args={"case_id": CASE_ID, "tenant_id": "tenant-b"}))

    assert where(error) == (PlanErrorCode.FORBIDDEN_ARGUMENT, "case", "/nodes/0/args/tenant_id")
    assert "tenant_id" in error.message


@pytest.mark.parametrize("key", sorted(FORBIDDEN_ARGUMENT_KEYS))
def test_every_identity_or_credential_key_is_forbidden_in_arguments(key: str) -> None:
    error = rejection(node("case"), node("policy", args={"case_id": CASE_ID, key: "x"}))

    assert where(error) == (PlanErrorCode.FORBIDDEN_ARGUMENT, "policy", f"/nodes/1/args/{key}")


@pytest.mark.parametrize(
    ("args", "location"),
    [
        pytest.param(
            {"case_id": CASE_ID, "filter": {"Token": "t"}}, "/nodes/0/args/filter/Token", id="nested"
        ),
        pytest.param(
            {"case_id": CASE_ID, "filters": [{"ok": 1}, {"scope": "cases:write"}]},
            "/nodes/0/args/filters/1/scope",
            id="in-a-list",
        ),
        pytest.param({"case_id": CASE_ID, "API_KEY": "k"}, "/nodes/0/args/API_KEY", id="any-case"),
    ],
)
def test_a_forbidden_key_is_found_at_any_depth_and_in_any_letter_case(
    args: dict[str, Any], location: str
) -> None:
    error = rejection(node("case", args=args))

    assert where(error) == (PlanErrorCode.FORBIDDEN_ARGUMENT, "case", location)


def test_a_forbidden_key_is_reported_before_the_schema_and_the_references_are_checked() -> None:
    # "ghost" is an unknown reference and "bad id" breaks the pattern: the identity key still wins.
    args = {"case_id": {"$ref": "ghost"}, "document_id": "bad id", "secret": "s"}
    error = rejection(node("resolve", RESOLVE_TOOL, args=args))

    assert where(error) == (PlanErrorCode.FORBIDDEN_ARGUMENT, "resolve", "/nodes/0/args/secret")


def test_a_forbidden_word_as_a_value_is_not_a_forbidden_key() -> None:
    plan = Plan.parse({"nodes": [node("case", args={"case_id": "token"})]})

    assert validate_plan(plan, CASEOPS_TOOLS, max_nodes=64) is plan


def test_a_missing_required_argument_is_rejected() -> None:
    error = rejection(node("docs", DOCUMENTS_TOOL), node("resolve", RESOLVE_TOOL, args={"case_id": CASE_ID}))

    assert where(error) == (PlanErrorCode.INVALID_ARGUMENTS, "resolve", "/nodes/1/args")
    assert "document_id" in error.message


def test_a_reference_stands_in_for_a_required_argument() -> None:
    plan = Plan.parse(
        {
            "nodes": [
                node("case"),
                node("docs", DOCUMENTS_TOOL, args={"case_id": {"$ref": "case", "pointer": "/case_id"}}),
                resolve_node("first", {"$ref": "docs", "pointer": "/documents/0/document_id"}),
                resolve_node(
                    "each", {"$item": "/document_id"}, for_each={"$ref": "docs", "pointer": "/documents"}
                ),
            ]
        }
    )

    assert validate_plan(plan, CASEOPS_TOOLS, max_nodes=64) is plan


def test_a_reference_does_not_excuse_a_bad_sibling_argument() -> None:
    error = rejection(
        node("docs", DOCUMENTS_TOOL),
        node(
            "resolve",
            RESOLVE_TOOL,
            args={
                "case_id": "bad case",
                "document_id": {"$ref": "docs", "pointer": "/documents/0/document_id"},
            },
        ),
    )

    assert where(error) == (PlanErrorCode.INVALID_ARGUMENTS, "resolve", "/nodes/1/args/case_id")


def test_an_after_dependency_on_an_earlier_node_is_accepted() -> None:
    plan = Plan.parse({"nodes": [node("case"), node("policy", after=["case"])]})

    assert validate_plan(plan, CASEOPS_TOOLS, max_nodes=64) is plan


@pytest.mark.parametrize(
    ("after", "code"),
    [
        ("policy", PlanErrorCode.SELF_REFERENCE),
        ("docs", PlanErrorCode.FORWARD_REFERENCE),
        ("ghost", PlanErrorCode.UNKNOWN_REFERENCE),
    ],
)
def test_an_after_dependency_is_checked_like_a_reference(after: str, code: PlanErrorCode) -> None:
    error = rejection(node("case"), node("policy", after=["case", after]), node("docs", DOCUMENTS_TOOL))

    assert where(error) == (code, "policy", "/nodes/1/after/1")


def test_check_arguments_reports_the_first_problem_of_resolved_arguments() -> None:
    contract = CASEOPS_TOOLS[RESOLVE_TOOL]

    assert check_arguments(contract, {"case_id": CASE_ID, "document_id": "D-1"}) is None
    problem = check_arguments(contract, {"case_id": CASE_ID, "document_id": "D 1"})
    assert problem is not None
    assert problem.startswith("/args/document_id: ")


def test_args_that_are_one_whole_reference_are_rejected() -> None:
    error = rejection(node("case"), node("again", args={"$ref": "case"}))

    assert where(error) == (PlanErrorCode.MALFORMED_REFERENCE, "again", "/nodes/1/args")


def test_a_trailing_newline_passes_the_published_pattern_but_not_the_dispatch_check() -> None:
    from mcp_server.contracts import GET_CASE_SNAPSHOT

    problem = check_arguments(GET_CASE_SNAPSHOT, {"case_id": "C-102\n"})

    assert problem is not None
    assert problem.startswith("/args/case_id")


@pytest.mark.parametrize(
    ("document_id", "location"),
    [
        ({"$ref": "docs", "pointer": "/documents/0/document_id\x00"}, "/nodes/1/args/document_id/pointer"),
        ("DOC\ud800", "/nodes/1/args/document_id"),
    ],
    ids=["nul-in-a-reference", "lone-surrogate"],
)
def test_an_argument_no_run_can_record_is_rejected_where_it_is(document_id: object, location: str) -> None:
    error = rejection(node("docs", DOCUMENTS_TOOL), resolve_node("resolve", document_id))

    assert where(error) == (PlanErrorCode.INVALID_ARGUMENTS, "resolve", location)
    assert "NUL" in error.message or "surrogate" in error.message

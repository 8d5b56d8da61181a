"""``next_steps``: what may happen next, decided from the run state alone, with no waves."""

from __future__ import annotations

from typing import Any

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_TOOL,
    DOCUMENT_IDS,
    DOCUMENTS_TOOL,
    POLICY_TOOL,
    RESOLVE_TOOL,
    dispatched,
    documents_output,
    expanded,
    failed,
    reads_done,
    resolution_output,
    resolve_args_of,
    run_created,
    running,
    succeeded,
)

from dag.events import GroupSettled, NodeDenied, RunEvent
from dag.fingerprint import action_fingerprint
from dag.policy import Decision
from dag.run_state import fold
from dag.scheduler import Expand, Ready, Settle, Skip, Unresolvable, next_steps
from dag.storable import MAX_DEPTH


def ready(node_id: str, tool: str, args: dict[str, Any]) -> Ready:
    return Ready(node_id, tool, args, action_fingerprint(tool, args))


def children_dispatched(count: int = len(DOCUMENT_IDS)) -> list[RunEvent]:
    return [
        dispatched(f"resolve[{index}]", RESOLVE_TOOL, resolve_args_of(DOCUMENT_IDS[index]))
        for index in range(count)
    ]


def plan_of(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"nodes": [{"id": "docs", "tool": DOCUMENTS_TOOL, "args": {"case_id": CASE_ID}}, *nodes]}


def test_nothing_is_scheduled_before_a_plan_is_accepted() -> None:
    assert next_steps(fold([run_created()])) == []


def test_case_policy_and_docs_are_ready_at_once_and_resolve_is_not(example_plan: dict[str, Any]) -> None:
    steps = next_steps(running(example_plan))

    assert steps == [
        ready("case", CASE_TOOL, {"case_id": CASE_ID}),
        ready("policy", POLICY_TOOL, {"case_id": CASE_ID}),
        ready("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}),
    ]


def test_a_running_node_is_not_scheduled_again(example_plan: dict[str, Any]) -> None:
    state = running(example_plan, dispatched("case", CASE_TOOL, {"case_id": CASE_ID}))

    assert [step.node_id for step in next_steps(state)] == ["policy", "docs"]


def test_resolve_expands_into_three_once_docs_lists_three_documents(example_plan: dict[str, Any]) -> None:
    state = running(example_plan, *reads_done())

    assert next_steps(state) == [Expand("resolve", 3)]


def test_resolve_expands_while_case_and_policy_are_still_running(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        dispatched("case", CASE_TOOL, {"case_id": CASE_ID}),
        dispatched("policy", POLICY_TOOL, {"case_id": CASE_ID}),
        dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}),
        succeeded("docs", documents_output(DOCUMENT_IDS)),
    )

    assert next_steps(state) == [Expand("resolve", 3)]


def test_expanded_children_are_ready_with_resolved_args_and_distinct_fingerprints(
    example_plan: dict[str, Any],
) -> None:
    state = running(example_plan, *reads_done(), expanded("resolve", 3))

    steps = next_steps(state)

    assert steps == [
        ready("resolve[0]", RESOLVE_TOOL, resolve_args_of("D-1")),
        ready("resolve[1]", RESOLVE_TOOL, resolve_args_of("D-2")),
        ready("resolve[2]", RESOLVE_TOOL, resolve_args_of("D-3")),
    ]
    assert len({step.fingerprint for step in steps if isinstance(step, Ready)}) == 3


def test_a_group_does_not_settle_while_a_child_is_running(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        *reads_done(),
        expanded("resolve", 3),
        *children_dispatched(),
        succeeded("resolve[2]", resolution_output("D-3", "MEDICAL_CERT")),
        succeeded("resolve[0]", resolution_output("D-1", "ID_CARD")),
    )

    assert next_steps(state) == []


def test_a_group_settles_as_succeeded_once_every_child_succeeded(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        *reads_done(),
        expanded("resolve", 3),
        *children_dispatched(),
        succeeded("resolve[2]", resolution_output("D-3", "MEDICAL_CERT")),
        succeeded("resolve[0]", resolution_output("D-1", "ID_CARD")),
        succeeded("resolve[1]", resolution_output("D-2", "RECEIPT")),
    )

    assert next_steps(state) == [Settle("resolve", succeeded=True)]


def test_a_group_with_a_failed_child_settles_as_failed(example_plan: dict[str, Any]) -> None:
    state = running(
        example_plan,
        *reads_done(),
        expanded("resolve", 3),
        *children_dispatched(),
        succeeded("resolve[0]", resolution_output("D-1", "ID_CARD")),
        failed("resolve[1]"),
        succeeded("resolve[2]", resolution_output("D-3", "MEDICAL_CERT")),
    )

    assert next_steps(state) == [Settle("resolve", succeeded=False)]


def test_an_empty_for_each_expands_to_nothing_and_settles_at_once(example_plan: dict[str, Any]) -> None:
    listed_nothing = running(example_plan, *reads_done(documents=documents_output([])))
    assert next_steps(listed_nothing) == [Expand("resolve", 0)]

    assert next_steps(
        running(example_plan, *reads_done(documents=documents_output([])), expanded("resolve", 0))
    ) == [Settle("resolve", succeeded=True)]


def test_a_failed_dependency_skips_its_dependent(example_plan: dict[str, Any]) -> None:
    state = running(example_plan, dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}), failed("docs"))

    steps = next_steps(state)

    assert Skip("resolve", cause_node_id="docs") in steps
    assert [step.node_id for step in steps] == ["case", "policy", "resolve"]


def test_a_denied_after_dependency_skips_its_dependent() -> None:
    plan = plan_of({"id": "case", "tool": CASE_TOOL, "args": {"case_id": CASE_ID}, "after": ["docs"]})
    denial = Decision(allowed=False, rule_id="scope.missing", reason="test")
    args = {"case_id": CASE_ID}
    state = running(
        plan,
        NodeDenied(at=AT, node_id="docs", tool=DOCUMENTS_TOOL, args=args, fingerprint="f", decision=denial),
    )

    assert next_steps(state) == [Skip("case", cause_node_id="docs")]


def test_a_node_waits_for_a_running_after_dependency() -> None:
    plan = plan_of({"id": "case", "tool": CASE_TOOL, "args": {"case_id": CASE_ID}, "after": ["docs"]})

    state = running(plan, dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}))

    assert next_steps(state) == []


def test_for_each_over_a_non_list_is_unresolvable(example_plan: dict[str, Any]) -> None:
    by_id = {"case_id": CASE_ID, "documents": {"D-1": {"document_id": "D-1"}}}
    state = running(example_plan, *reads_done(documents=by_id))

    [step] = next_steps(state)

    assert isinstance(step, Unresolvable)
    assert (step.node_id, step.code) == ("resolve", "FOR_EACH_NOT_A_LIST")
    assert "dict" in step.message


def test_for_each_over_a_missing_list_is_unresolvable(example_plan: dict[str, Any]) -> None:
    state = running(example_plan, *reads_done(documents={"case_id": CASE_ID}))

    [step] = next_steps(state)

    assert isinstance(step, Unresolvable)
    assert (step.node_id, step.code) == ("resolve", "REFERENCE_UNRESOLVED")
    assert "/documents" in step.message


def test_a_reference_to_a_missing_output_part_is_unresolvable() -> None:
    pointer = "/documents/5/document_id"
    plan = plan_of(
        {
            "id": "first",
            "tool": RESOLVE_TOOL,
            "args": {"case_id": CASE_ID, "document_id": {"$ref": "docs", "pointer": pointer}},
        }
    )
    state = running(
        plan,
        dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}),
        succeeded("docs", documents_output(["D-1"])),
    )

    [step] = next_steps(state)

    assert isinstance(step, Unresolvable)
    assert (step.node_id, step.code) == ("first", "REFERENCE_UNRESOLVED")
    assert pointer in step.message


def test_a_child_whose_item_lacks_the_named_field_is_unresolvable(example_plan: dict[str, Any]) -> None:
    listing = documents_output(["D-1", "D-2"])
    del listing["documents"][1]["document_id"]
    state = running(example_plan, *reads_done(documents=listing), expanded("resolve", 2))

    [first, second] = next_steps(state)

    assert first == ready("resolve[0]", RESOLVE_TOOL, resolve_args_of("D-1"))
    assert isinstance(second, Unresolvable)
    assert (second.node_id, second.code) == ("resolve[1]", "REFERENCE_UNRESOLVED")


def test_an_end_of_list_pointer_is_unresolvable_rather_than_a_crash() -> None:
    # "-" names the element after the last one: nothing to read (RFC 6901 §4).
    plan = plan_of(
        {
            "id": "last",
            "tool": RESOLVE_TOOL,
            "args": {"case_id": CASE_ID, "document_id": {"$ref": "docs", "pointer": "/documents/-"}},
        }
    )
    state = running(
        plan,
        dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}),
        succeeded("docs", documents_output(["D-1"])),
    )

    [step] = next_steps(state)

    assert isinstance(step, Unresolvable)
    assert (step.node_id, step.code) == ("last", "REFERENCE_UNRESOLVED")


@pytest.mark.parametrize(
    ("pointer", "fits"), [("/deep", True), ("", False)], ids=["inner-part", "whole-output"]
)
def test_arguments_a_reference_makes_deeper_than_a_run_records_are_unresolvable(
    pointer: str, fits: bool
) -> None:
    """The plan's arguments and the output are each within ``MAX_DEPTH``; put together they need not be."""
    deep: Any = 1
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    output = {"deep": deep}  # MAX_DEPTH levels, as deep as an output may be
    plan = plan_of(
        {"id": "use", "tool": RESOLVE_TOOL, "args": {"value": {"$ref": "docs", "pointer": pointer}}}
    )
    state = running(plan, dispatched("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}), succeeded("docs", output))

    [step] = next_steps(state)

    if fits:
        assert step == ready("use", RESOLVE_TOOL, {"value": deep})
    else:
        assert isinstance(step, Unresolvable)
        assert (step.node_id, step.code) == ("use", "ARGUMENTS_TOO_DEEP")
        assert str(MAX_DEPTH) in step.message


def test_a_for_each_over_a_group_iterates_its_childrens_outputs(example_plan: dict[str, Any]) -> None:
    plan = {
        "nodes": [
            *example_plan["nodes"],
            {
                "id": "recheck",
                "tool": RESOLVE_TOOL,
                "for_each": {"$ref": "resolve"},
                "args": {"case_id": CASE_ID, "document_id": {"$item": "/document_id"}},
            },
        ]
    }
    events = [
        *reads_done(documents=documents_output(["D-1", "D-2"])),
        expanded("resolve", 2),
        *children_dispatched(2),
        succeeded("resolve[1]", resolution_output("D-2", "RECEIPT")),
        succeeded("resolve[0]", resolution_output("D-1", "ID_CARD")),
        GroupSettled(at=AT, node_id="resolve", succeeded=True),
    ]

    assert next_steps(running(plan, *events)) == [Expand("recheck", 2)]
    assert next_steps(running(plan, *events, expanded("recheck", 2))) == [
        ready("recheck[0]", RESOLVE_TOOL, resolve_args_of("D-1")),
        ready("recheck[1]", RESOLVE_TOOL, resolve_args_of("D-2")),
    ]

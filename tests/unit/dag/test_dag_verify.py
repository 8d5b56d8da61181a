"""``unsupported_citations``: a final answer may cite only strings the run's tool outputs contain."""

from __future__ import annotations

from dag_run_builders import (
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    POLICY_TOOL,
    dispatched,
    failed,
    ran,
    running,
)

from dag.verify import observed_strings, unsupported_citations

CASE_ARGS = {"case_id": CASE_ID}
PLAN = {
    "nodes": [
        {"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS},
        {"id": "policy", "tool": POLICY_TOOL, "args": CASE_ARGS},
    ]
}
NESTED = {"case_id": CASE_ID, "deep": [{"ref": "doc://C-102/D-1"}, ["policy://P@1"]], "count": 3}


def test_citations_found_anywhere_in_an_output_are_supported() -> None:
    state = running(PLAN, *ran("case", CASE_TOOL, CASE_ARGS, NESTED))

    assert unsupported_citations(["doc://C-102/D-1", "policy://P@1", CASE_ID], state) == []


def test_citations_no_output_contains_are_returned_sorted_and_once() -> None:
    state = running(PLAN, *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT))

    unsupported = unsupported_citations(
        ["z://made-up", "a://made-up", "z://made-up", "case://C-102@3"], state
    )

    assert unsupported == ["a://made-up", "z://made-up"]


def test_keys_and_numbers_in_an_output_are_not_observations() -> None:
    state = running(PLAN, *ran("case", CASE_TOOL, CASE_ARGS, NESTED))

    assert unsupported_citations(["deep", "3", "ref"], state) == ["3", "deep", "ref"]
    assert observed_strings(state) == frozenset({CASE_ID, "doc://C-102/D-1", "policy://P@1"})


def test_arguments_of_running_or_failed_nodes_are_not_observations() -> None:
    state = running(
        PLAN,
        dispatched("case", CASE_TOOL, CASE_ARGS),
        dispatched("policy", POLICY_TOOL, CASE_ARGS),
        failed("policy"),
    )

    assert observed_strings(state) == frozenset()

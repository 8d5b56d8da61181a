"""Whether a run's resource fits the tools it would use: keys a tool needs, keys no tool uses."""

from __future__ import annotations

from dag_run_builders import READ_FILE

from dag.contracts import catalogue_of
from dag.run_resource import missing_resource_keys, resource_mismatch
from mcp_server.contracts import CASEOPS_TOOLS

MIXED = catalogue_of(*CASEOPS_TOOLS.values(), READ_FILE)


def test_a_binding_names_the_resource_key_it_needs_not_its_field() -> None:
    assert READ_FILE.resource_keys_needed == frozenset({"root"})
    assert missing_resource_keys(READ_FILE, {"path": "/srv"}) == ("root",)
    assert missing_resource_keys(READ_FILE, {"root": "/srv"}) == ()


def test_a_case_fits_the_caseops_plan_and_the_caseops_catalogue() -> None:
    assert resource_mismatch({"case_id": "C-102"}, CASEOPS_TOOLS, planned=list(CASEOPS_TOOLS)) is None
    assert resource_mismatch({"case_id": "C-102"}, MIXED) is None  # a planner is simply not shown read_file


def test_a_plan_whose_tool_needs_a_key_the_resource_lacks_names_the_key_and_the_tool() -> None:
    mismatch = resource_mismatch(
        {"case_id": "C-102"}, MIXED, planned=["caseops_get_case_snapshot", "read_file"]
    )

    assert mismatch is not None
    assert mismatch.missing == {"root": ("read_file",)}
    assert mismatch.unused == ()
    assert "'root'" in mismatch.message
    assert "read_file" in mismatch.message


def test_a_key_no_tool_of_the_run_uses_is_a_mismatch_with_or_without_a_plan() -> None:
    without_plan = resource_mismatch({"case_id": "C-102", "repo": "raydag"}, MIXED)
    with_plan = resource_mismatch(
        {"case_id": "C-102", "root": "/srv"}, MIXED, planned=["caseops_get_case_snapshot"]
    )

    assert without_plan is not None
    assert (dict(without_plan.missing), without_plan.unused) == ({}, ("repo",))
    assert with_plan is not None
    assert with_plan.unused == ("root",)
    assert "'root'" in with_plan.message
    assert with_plan.as_dict() == {"missing": {}, "unused": ["root"]}

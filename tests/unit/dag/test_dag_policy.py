"""``authorize``: the policy's decision for one resolved node, as a value with the rule that decided it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from dag_run_builders import CASE_ID, CASE_TOOL, DOCUMENTS_TOOL

from dag.contracts import Risk, ToolCatalogue, catalogue_of
from dag.policy import Decision, Principal, authorize
from mcp_server.contracts import ALL_SCOPES, CASEOPS_TOOLS, GET_CASE_SNAPSHOT, SCOPE_DOCUMENTS

ADJUSTER = Principal(tenant_id="tenant-a", subject="adjuster-7", scopes=frozenset(ALL_SCOPES))


def decide(
    tool: str = CASE_TOOL,
    args: dict[str, Any] | None = None,
    *,
    principal: Principal = ADJUSTER,
    catalogue: ToolCatalogue = CASEOPS_TOOLS,
) -> Decision:
    return authorize(
        principal=principal,
        run_case_id=CASE_ID,
        catalogue=catalogue,
        tool=tool,
        args={"case_id": CASE_ID} if args is None else args,
    )


def test_a_read_only_tool_in_scope_on_the_runs_case_is_allowed() -> None:
    decision = decide()

    assert (decision.allowed, decision.rule_id) == (True, "allow.read_only_in_scope")


@pytest.mark.parametrize("tool", sorted(CASEOPS_TOOLS))
def test_every_caseops_tool_is_allowed_for_a_principal_with_all_scopes(tool: str) -> None:
    assert decide(tool, {"case_id": CASE_ID, "document_id": "D-1"}).allowed is True


def test_a_tool_outside_the_catalogue_is_denied() -> None:
    decision = decide("caseops_delete_case")

    assert (decision.allowed, decision.rule_id) == (False, "tool.not_in_catalogue")


def test_a_tool_whose_scope_the_principal_lacks_is_denied() -> None:
    principal = dataclasses.replace(ADJUSTER, scopes=frozenset(ALL_SCOPES) - {SCOPE_DOCUMENTS})

    decision = decide(DOCUMENTS_TOOL, principal=principal)

    assert (decision.allowed, decision.rule_id) == (False, "scope.missing")
    assert SCOPE_DOCUMENTS in decision.reason


@pytest.mark.parametrize(
    "args",
    [
        pytest.param({"case_id": "C-999"}, id="another-case"),
        pytest.param({}, id="no-case"),
        pytest.param({"case_id": ["C-102"]}, id="case-in-a-list"),
    ],
)
def test_a_node_targeting_anything_but_the_runs_case_is_denied(args: dict[str, Any]) -> None:
    decision = decide(args=args)

    assert (decision.allowed, decision.rule_id) == (False, "resource.case_bound")


def test_a_tool_that_writes_is_denied_even_with_scope_and_the_runs_case() -> None:
    destroy = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_close_case", risk=Risk.IRREVERSIBLE_WRITE)

    decision = decide("caseops_close_case", catalogue=catalogue_of(GET_CASE_SNAPSHOT, destroy))

    assert (decision.allowed, decision.rule_id) == (False, "risk.read_only_only")
    assert "irreversible_write" in decision.reason


def test_a_reversible_write_is_denied_too() -> None:
    edit = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_tag_case", risk=Risk.REVERSIBLE_WRITE)

    decision = decide("caseops_tag_case", catalogue=catalogue_of(edit))

    assert (decision.allowed, decision.rule_id) == (False, "risk.read_only_only")


def test_a_contract_without_run_bound_fields_does_not_check_the_case() -> None:
    unbound = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_list_policies", run_bound=frozenset())

    decision = decide("caseops_list_policies", {"case_id": "C-999"}, catalogue=catalogue_of(unbound))

    assert decision.allowed is True


def test_a_run_binding_the_policy_cannot_check_is_denied_rather_than_waved_through() -> None:
    claims_tool = dataclasses.replace(
        GET_CASE_SNAPSHOT, name="claims_tool", run_bound=frozenset({"claim_id"})
    )

    decision = decide("claims_tool", {"claim_id": "X-1"}, catalogue=catalogue_of(claims_tool))

    assert (decision.allowed, decision.rule_id) == (False, "resource.unknown_binding")

"""``authorize`` and ``effective_tools``: the policy's decisions, as values naming the rule that decided."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from dag_run_builders import (
    CASE_ID,
    CASE_TOOL,
    DOCUMENTS_TOOL,
    POLICY_TOOL,
    PROPERTY_SETTINGS,
    READ_FILE,
    RESOLVE_TOOL,
)
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from dag.contracts import Risk, RunBinding, ToolCatalogue, catalogue_of
from dag.policy import Decision, Principal, RunAuthority, authorize, effective_tools, observed_values
from mcp_server.contracts import (
    ALL_SCOPES,
    CASEOPS_CHECKS,
    GET_CASE_SNAPSHOT,
    RESOLVE_DOCUMENT_ALIAS,
    SCOPE_DOCUMENTS,
    SCOPE_POLICIES,
)

RESOLVE = dataclasses.replace(RESOLVE_DOCUMENT_ALIAS, observed_bound=frozenset({"document_id"}))
CATALOGUE = {**CASEOPS_CHECKS, RESOLVE_TOOL: RESOLVE}
"""The caseops tools, the alias resolution bound to observed document ids as the caseops contract declares."""
ADJUSTER = Principal(tenant_id="tenant-a", subject="adjuster-7", scopes=frozenset(ALL_SCOPES))
RUN = RunAuthority(ADJUSTER, {"case_id": CASE_ID})
LISTED = {"document_id": frozenset({"D-1"})}
"""What the run has observed so far: the listing named D-1."""


def decide(
    tool: str = CASE_TOOL,
    args: Mapping[str, Any] | None = None,
    *,
    authority: RunAuthority = RUN,
    catalogue: ToolCatalogue = CATALOGUE,
    observed: Mapping[str, frozenset[str]] = LISTED,
) -> Decision:
    return authorize(authority, catalogue, tool, {"case_id": CASE_ID} if args is None else args, observed)


def rule(decision: Decision) -> tuple[bool, str]:
    return decision.allowed, decision.rule_id


# ---------------------------------------------------------------- authorize


def test_a_read_only_tool_in_scope_on_the_runs_case_is_allowed() -> None:
    assert rule(decide()) == (True, "allow.read_only_in_scope")


@pytest.mark.parametrize("tool", sorted(CASEOPS_CHECKS))
def test_every_caseops_tool_is_allowed_for_a_principal_with_all_scopes(tool: str) -> None:
    args = {"case_id": CASE_ID, "document_id": "D-1"} if tool == RESOLVE_TOOL else {"case_id": CASE_ID}

    assert decide(tool, args).allowed is True


def test_a_tool_outside_the_catalogue_is_denied() -> None:
    assert rule(decide("caseops_delete_case")) == (False, "tool.not_in_catalogue")


def test_a_tool_outside_the_tenants_catalogue_is_denied() -> None:
    tenant = dataclasses.replace(RUN, tenant_tools=frozenset({CASE_TOOL}))

    assert rule(decide(POLICY_TOOL, authority=tenant)) == (False, "tenant.tool_not_granted")
    assert rule(decide(CASE_TOOL, authority=tenant)) == (True, "allow.read_only_in_scope")


def test_a_tool_whose_scope_the_principal_lacks_is_denied() -> None:
    principal = dataclasses.replace(ADJUSTER, scopes=frozenset(ALL_SCOPES) - {SCOPE_DOCUMENTS})

    decision = decide(DOCUMENTS_TOOL, authority=dataclasses.replace(RUN, principal=principal))

    assert rule(decision) == (False, "scope.missing")
    assert SCOPE_DOCUMENTS in decision.reason


def test_a_tool_not_used_in_the_runs_stage_is_denied() -> None:
    decision = decide(authority=dataclasses.replace(RUN, stage="settle"))

    assert rule(decision) == (False, "stage.not_allowed")
    assert "settle" in decision.reason


def test_a_tool_declared_for_the_runs_stage_is_allowed_in_it() -> None:
    settling = dataclasses.replace(GET_CASE_SNAPSHOT, stages=frozenset({"settle"}))

    decision = decide(authority=dataclasses.replace(RUN, stage="settle"), catalogue=catalogue_of(settling))

    assert rule(decision) == (True, "allow.read_only_in_scope")


def test_a_tools_health_is_no_part_of_what_a_run_may_do() -> None:
    # An unwell tool makes calls wait (dag.health); the policy has no rule, and no input, for it.
    assert "unhealthy" not in {field.name for field in dataclasses.fields(RunAuthority)}
    assert rule(decide()) == (True, "allow.read_only_in_scope")


@pytest.mark.parametrize(
    "args",
    [
        pytest.param({"case_id": "C-999"}, id="another-case"),
        pytest.param({}, id="no-case"),
        pytest.param({"case_id": ["C-102"]}, id="case-in-a-list"),
    ],
)
def test_a_node_targeting_anything_but_the_runs_case_is_denied(args: dict[str, Any]) -> None:
    assert rule(decide(args=args)) == (False, "resource.case_bound")


def test_a_tool_that_writes_is_denied_even_with_scope_and_the_runs_case() -> None:
    destroy = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_close_case", risk=Risk.IRREVERSIBLE_WRITE)

    decision = decide("caseops_close_case", catalogue=catalogue_of(GET_CASE_SNAPSHOT, destroy))

    assert rule(decision) == (False, "risk.read_only_only")
    assert "irreversible_write" in decision.reason


def test_a_reversible_write_is_denied_too() -> None:
    edit = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_tag_case", risk=Risk.REVERSIBLE_WRITE)

    assert rule(decide("caseops_tag_case", catalogue=catalogue_of(edit))) == (False, "risk.read_only_only")


def test_a_contract_without_run_bound_fields_does_not_check_the_case() -> None:
    unbound = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_list_policies", run_bound=frozenset())

    decision = decide("caseops_list_policies", {"case_id": "C-999"}, catalogue=catalogue_of(unbound))

    assert decision.allowed is True


class ClaimInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    claim_id: str


def test_a_run_binding_to_a_key_the_runs_resource_lacks_is_denied_rather_than_waved_through() -> None:
    claims_tool = dataclasses.replace(
        GET_CASE_SNAPSHOT, name="claims_tool", input_model=ClaimInput, run_bound=frozenset({"claim_id"})
    )

    decision = decide("claims_tool", {"claim_id": "X-1"}, catalogue=catalogue_of(claims_tool))

    assert rule(decision) == (False, "resource.key_missing")
    assert "'claim_id'" in decision.reason
    assert "claims_tool" not in effective_tools(RUN, catalogue_of(claims_tool))


def test_a_run_bound_field_is_checked_against_the_resource_key_its_binding_names() -> None:
    claims_tool = dataclasses.replace(
        GET_CASE_SNAPSHOT,
        name="claims_tool",
        input_model=ClaimInput,
        run_bound=frozenset({"claim_id"}),
        resource_keys=(RunBinding("claim_id", "case_id"),),
    )
    catalogue = catalogue_of(claims_tool)

    assert rule(decide("claims_tool", {"claim_id": CASE_ID}, catalogue=catalogue)) == (
        True,
        "allow.read_only_in_scope",
    )
    assert rule(decide("claims_tool", {"claim_id": "C-999"}, catalogue=catalogue)) == (
        False,
        "resource.case_bound",
    )


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/srv/reports", True),
        ("/srv/reports/2026/q1.txt", True),
        ("/srv/reports/../secrets", False),
        ("/srv/reports/%2e%2e/secrets", False),
        ("/srv/reports-old/a", False),
        ("reports/a", False),
    ],
)
def test_a_path_bound_to_the_runs_root_must_stay_under_it(path: str, allowed: bool) -> None:
    authority = RunAuthority(ADJUSTER, {"root": "/srv/reports"})

    decision = decide("read_file", {"path": path}, catalogue=catalogue_of(READ_FILE), authority=authority)

    assert rule(decision) == (
        (True, "allow.read_only_in_scope") if allowed else (False, "resource.root_bound")
    )


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/srv/reports-old/a", "the node's path is not within the run's root"),
        (
            "/srv/reports/../reports/a",
            "the node's path is not in normal form: it has a '.', '..' or empty segment, or a trailing '/'",
        ),
        (
            "/srv/reports/\u2024\u2024/a",
            "the node's path is not in normal form: Unicode NFKC normalization changes it",
        ),
        ("/srv/reports/%2e%2e/secrets", "the node's path leaves the run's root when read percent-decoded"),
    ],
)
def test_a_path_denial_says_why_the_path_was_refused(path: str, reason: str) -> None:
    authority = RunAuthority(ADJUSTER, {"root": "/srv/reports"})

    decision = decide("read_file", {"path": path}, catalogue=catalogue_of(READ_FILE), authority=authority)

    assert (decision.allowed, decision.rule_id, decision.reason) == (False, "resource.root_bound", reason)


def test_an_equality_denial_keeps_its_reason() -> None:
    decision = decide(args={"case_id": "C-999"})

    assert decision.reason == "the node's case_id is not within the run's case_id"


def test_a_document_id_the_run_has_observed_is_allowed() -> None:
    decision = decide(RESOLVE_TOOL, {"case_id": CASE_ID, "document_id": "D-1"})

    assert rule(decision) == (True, "allow.read_only_in_scope")


@pytest.mark.parametrize(
    ("document_id", "observed"),
    [
        pytest.param("D-9", LISTED, id="never-listed"),
        pytest.param("D-1", {}, id="nothing-observed"),
        pytest.param("D-1", {"case_id": frozenset({"D-1"})}, id="seen-under-another-key"),
        pytest.param(None, LISTED, id="no-document-id"),
    ],
)
def test_a_document_id_the_run_has_not_observed_is_denied(
    document_id: str | None, observed: Mapping[str, frozenset[str]]
) -> None:
    args = {"case_id": CASE_ID} if document_id is None else {"case_id": CASE_ID, "document_id": document_id}

    decision = decide(RESOLVE_TOOL, args, observed=observed)

    assert rule(decision) == (False, "resource.not_observed")


def test_the_case_binding_is_checked_before_the_observed_binding() -> None:
    decision = decide(RESOLVE_TOOL, {"case_id": "C-999", "document_id": "D-9"})

    assert rule(decision) == (False, "resource.case_bound")


# ---------------------------------------------------------------- observed_values


def test_observed_values_collects_strings_under_the_named_keys_at_any_depth() -> None:
    outputs = [
        {"documents": [{"document_id": "D-1"}, {"document_id": "D-2", "nested": {"document_id": "D-3"}}]},
        {"document_id": 7, "case_id": "C-102"},
        ["not", {"document_id": "D-4"}],
    ]

    found = observed_values(outputs, ["document_id", "case_id", "policy_id"])

    assert found == {
        "document_id": frozenset({"D-1", "D-2", "D-3", "D-4"}),
        "case_id": frozenset({"C-102"}),
        "policy_id": frozenset(),
    }


# ---------------------------------------------------------------- effective_tools

CLOSE_CASE = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_close_case", risk=Risk.IRREVERSIBLE_WRITE)
SETTLE_ONLY = dataclasses.replace(GET_CASE_SNAPSHOT, name="caseops_settle", stages=frozenset({"settle"}))
WIDE_CATALOGUE = {**CATALOGUE, CLOSE_CASE.name: CLOSE_CASE, SETTLE_ONLY.name: SETTLE_ONLY}


def test_a_principal_with_every_scope_sees_the_read_only_tools_of_its_stage() -> None:
    assert sorted(effective_tools(RUN, WIDE_CATALOGUE)) == sorted(CASEOPS_CHECKS)


@pytest.mark.parametrize(
    ("authority", "hidden"),
    [
        pytest.param(
            dataclasses.replace(RUN, tenant_tools=frozenset(WIDE_CATALOGUE) - {POLICY_TOOL}),
            {POLICY_TOOL},
            id="tenant-catalogue",
        ),
        pytest.param(
            dataclasses.replace(
                RUN, principal=dataclasses.replace(ADJUSTER, scopes=frozenset(ALL_SCOPES) - {SCOPE_POLICIES})
            ),
            {POLICY_TOOL},
            id="scope",
        ),
    ],
)
def test_effective_tools_hides_what_the_tenant_or_scopes_rule_out(
    authority: RunAuthority, hidden: set[str]
) -> None:
    assert sorted(effective_tools(authority, WIDE_CATALOGUE)) == sorted(set(CASEOPS_CHECKS) - hidden)


def test_effective_tools_never_offers_a_write_even_when_the_tenant_grants_it() -> None:
    tenant = dataclasses.replace(RUN, tenant_tools=frozenset(WIDE_CATALOGUE))

    assert CLOSE_CASE.name not in effective_tools(tenant, WIDE_CATALOGUE)


def test_effective_tools_offers_only_the_tools_of_the_runs_stage() -> None:
    settling = dataclasses.replace(RUN, stage="settle")

    assert sorted(effective_tools(settling, WIDE_CATALOGUE)) == [SETTLE_ONLY.name]


def test_effective_tools_keeps_the_contracts_themselves() -> None:
    tools = effective_tools(RUN, CASEOPS_CHECKS)

    assert all(tools[name] is CASEOPS_CHECKS[name] for name in tools)


# ---------------------------------------------------------------- the policy property

TOOL_NAMES = sorted(WIDE_CATALOGUE)


@st.composite
def authorities(draw: st.DrawFn) -> RunAuthority:
    """A run's authority with up to two of scopes, stage and tenant catalogue changed from the usual.

    Starting from what a real run holds keeps many examples allowed: a property about allowed decisions
    says little if nearly every example is denied.
    """
    changed = draw(st.sets(st.sampled_from(["scopes", "stage", "tenant"]), max_size=2))
    scopes = frozenset(ALL_SCOPES)
    if "scopes" in changed:
        scopes = draw(st.frozensets(st.sampled_from([*ALL_SCOPES, "cases:write"])))
    return RunAuthority(
        Principal(tenant_id="tenant-a", subject="adjuster-7", scopes=scopes),
        {"case_id": CASE_ID},
        stage=draw(st.sampled_from(["settle", "review"])) if "stage" in changed else "investigate",
        tenant_tools=draw(st.frozensets(st.sampled_from(TOOL_NAMES))) if "tenant" in changed else None,
    )


identifiers = st.sampled_from([CASE_ID, CASE_ID, CASE_ID, "C-999", "D-1", "D-1", "D-9"])


@PROPERTY_SETTINGS
@given(
    authority=authorities(),
    tool=st.sampled_from([*TOOL_NAMES, "caseops_delete_case"]),
    args=st.fixed_dictionaries({"case_id": identifiers}, optional={"document_id": identifiers})
    | st.fixed_dictionaries({}, optional={"document_id": identifiers}),
    observed=st.fixed_dictionaries(
        {}, optional={"document_id": st.frozensets(identifiers), "case_id": st.frozensets(identifiers)}
    ),
)
def test_authorize_never_allows_a_tool_outside_effective_tools(
    authority: RunAuthority,
    tool: str,
    args: dict[str, Any],
    observed: dict[str, frozenset[str]],
) -> None:
    decision = authorize(authority, WIDE_CATALOGUE, tool, args, observed)

    if decision.allowed:
        assert tool in effective_tools(authority, WIDE_CATALOGUE)
    else:
        assert decision.rule_id != "allow.read_only_in_scope"


@PROPERTY_SETTINGS
@given(authority=authorities(), tool=st.sampled_from(TOOL_NAMES))
def test_a_tool_in_effective_tools_is_allowed_on_the_runs_case_and_an_observed_document(
    authority: RunAuthority, tool: str
) -> None:
    # The converse: effective_tools shows the planner nothing the policy would then refuse for the tool.
    args = (
        {"case_id": authority.resource["case_id"], "document_id": "D-1"}
        if tool == RESOLVE_TOOL
        else {"case_id": authority.resource["case_id"]}
    )

    decision = authorize(authority, WIDE_CATALOGUE, tool, args, LISTED)

    assert decision.allowed is (tool in effective_tools(authority, WIDE_CATALOGUE))

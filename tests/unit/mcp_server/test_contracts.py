"""The caseops contracts: closed, identifier-checked inputs and concrete object outputs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dag.contracts import Risk, ToolContract
from dag.validate import check_arguments
from mcp_server.contracts import (
    ALL_SCOPES,
    CASEOPS_CHECKS,
    CASEOPS_TOOLS,
    DRAFT_DOCUMENT_REQUEST,
    EXPORT_EVIDENCE,
    FIND_DOCUMENT_REQUEST,
    GET_CASE_SNAPSHOT,
    GET_POLICY_REQUIREMENTS,
    IDENTIFIER_PATTERN,
    LIST_UNCLASSIFIED_DOCUMENTS,
    RESOLVE_DOCUMENT_ALIAS,
    SEND_DOCUMENT_REQUEST,
)

CONTRACTS = [GET_CASE_SNAPSHOT, GET_POLICY_REQUIREMENTS, LIST_UNCLASSIFIED_DOCUMENTS, RESOLVE_DOCUMENT_ALIAS]
by_name = pytest.mark.parametrize("contract", CONTRACTS, ids=lambda contract: contract.name)


def valid_args(contract: ToolContract) -> dict[str, str]:
    fields = contract.input_schema["required"]
    return {field: {"case_id": "C-102", "document_id": "DOC-C102-003"}[field] for field in fields}


WRITES = [DRAFT_DOCUMENT_REQUEST, SEND_DOCUMENT_REQUEST]


def test_the_catalogue_holds_the_checks_the_writes_the_reconciling_read_and_the_evidence_export() -> None:
    assert sorted(CASEOPS_CHECKS) == sorted(contract.name for contract in CONTRACTS)
    assert all(CASEOPS_TOOLS[contract.name] is contract for contract in CONTRACTS)
    assert sorted(CASEOPS_TOOLS) == sorted(
        [*CASEOPS_CHECKS, *(c.name for c in WRITES), FIND_DOCUMENT_REQUEST.name, EXPORT_EVIDENCE.name]
    )
    assert EXPORT_EVIDENCE.risk is Risk.READ_ONLY
    assert EXPORT_EVIDENCE.scope in ALL_SCOPES


def test_the_writes_are_a_reversible_draft_and_an_irreversible_send_of_the_stage_that_acts() -> None:
    assert [contract.risk for contract in WRITES] == [Risk.REVERSIBLE_WRITE, Risk.IRREVERSIBLE_WRITE]
    for contract in [*WRITES, FIND_DOCUMENT_REQUEST]:
        assert contract.stages == frozenset({"act"})
        assert contract.scope in ALL_SCOPES
        assert "idempotency_key" in contract.input_schema["required"]
        assert contract.input_schema["additionalProperties"] is False


@by_name
def test_every_caseops_tool_is_read_only_with_a_known_scope_and_bound_to_the_run_case(
    contract: ToolContract,
) -> None:
    assert contract.risk is Risk.READ_ONLY
    assert contract.scope in ALL_SCOPES
    assert contract.run_bound == frozenset({"case_id"})


@by_name
def test_input_schema_is_closed_and_every_field_is_a_required_identifier(contract: ToolContract) -> None:
    schema = contract.input_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert "case_id" in schema["required"]
    assert sorted(schema["required"]) == sorted(schema["properties"])
    for field, spec in schema["properties"].items():
        assert spec["type"] == "string", field
        assert spec["pattern"] == IDENTIFIER_PATTERN, field
        assert spec["maxLength"] == 64, field


def test_only_the_alias_resolution_takes_a_document_id() -> None:
    takes_document = {c.name for c in CONTRACTS if "document_id" in c.input_schema["properties"]}
    assert takes_document == {RESOLVE_DOCUMENT_ALIAS.name}


@by_name
def test_output_schema_is_a_concrete_object_with_required_properties(contract: ToolContract) -> None:
    schema = contract.output_schema
    assert schema["type"] == "object"
    assert schema["properties"], "an output must declare its properties"
    assert set(schema["required"]) <= set(schema["properties"])
    assert "case_id" in schema["required"]
    for field, spec in schema["properties"].items():
        assert spec, f"{field} is declared as 'anything'"


@by_name
def test_valid_arguments_pass_both_the_model_and_the_schema(contract: ToolContract) -> None:
    args = valid_args(contract)
    contract.input_model.model_validate(args)
    assert check_arguments(contract, args) is None


@by_name
@pytest.mark.parametrize("extra", ["tenant_id", "subject", "scopes"])
def test_an_extra_field_is_refused_by_the_model_and_the_schema(contract: ToolContract, extra: str) -> None:
    args = {**valid_args(contract), extra: "tenant-other"}
    with pytest.raises(ValidationError, match=extra):
        contract.input_model.model_validate(args)
    problem = check_arguments(contract, args)
    assert problem is not None
    assert extra in problem


@by_name
@pytest.mark.parametrize("bad_id", ["", "-C102", "C 102", "C/102", "C-102;DROP", "x" * 65, "Ｃ-102"])
def test_a_malformed_case_id_is_refused_by_the_model_and_the_schema(
    contract: ToolContract, bad_id: str
) -> None:
    args = {**valid_args(contract), "case_id": bad_id}
    with pytest.raises(ValidationError):
        contract.input_model.model_validate(args)
    assert check_arguments(contract, args) is not None


@by_name
def test_the_schema_refuses_a_case_id_with_a_trailing_newline_as_the_model_does(
    contract: ToolContract,
) -> None:
    # The runtime checks resolved arguments with the JSON schema; the server parses them with the model.
    # Both must refuse the same values, or the runtime dispatches calls the server can only reject.
    args = {**valid_args(contract), "case_id": "C-102\n"}
    with pytest.raises(ValidationError):
        contract.input_model.model_validate(args)
    assert check_arguments(contract, args) is not None


def test_the_alias_resolution_may_only_name_a_document_id_the_run_has_observed() -> None:
    # A planner could otherwise resolve any document id of the case it guessed or was told by a document.
    assert RESOLVE_DOCUMENT_ALIAS.observed_bound == frozenset({"document_id"})
    assert RESOLVE_DOCUMENT_ALIAS.proposable == frozenset()


@by_name
def test_every_caseops_check_is_idempotent_retried_at_most_three_times_and_used_in_both_stages(
    contract: ToolContract,
) -> None:
    assert contract.idempotent is True
    assert contract.max_attempts == 3
    assert contract.stages == frozenset({"investigate", "act"})  # a run that acts checks first

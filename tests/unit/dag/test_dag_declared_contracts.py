"""Contracts whose shapes a server declared as JSON Schemas: checked like model contracts, in the schema's
dialect, hashable, and refusing to be used as pydantic models; run bindings that decide by equality or path."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from dag.contracts import BindingMatch, DeclaredBySchema, Risk, RunBinding, ToolContract
from dag.schemas import JsonSchema, SchemaInvalid
from dag.validate import check_arguments
from dag.writes import Intent, OperationSpec

READ_INPUT = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"path": {"type": "string"}, "head": {"type": "number"}},
    "required": ["path"],
}
READ_OUTPUT = {
    "type": "object",
    "properties": {"content": {"type": "string"}},
    "required": ["content"],
    "additionalProperties": False,
}


def declared(**changes: Any) -> ToolContract:
    fields: dict[str, Any] = {
        "name": "read_text_file",
        "version": "sha256:0",
        "description": "Read a file",
        "scope": "files:read",
        "risk": Risk.READ_ONLY,
        "declared_input": JsonSchema.of(READ_INPUT),
        "declared_output": JsonSchema.of(READ_OUTPUT),
        "run_bound": frozenset({"path"}),
        "resource_keys": (RunBinding("path", "root", BindingMatch.PATH_WITHIN),),
        **changes,
    }
    return ToolContract(**fields)


def test_a_declared_contract_checks_arguments_and_outputs_against_the_servers_schemas() -> None:
    contract = declared()

    assert check_arguments(contract, {"path": "/srv/a.txt", "head": 2}) is None
    assert check_arguments(contract, {"head": 2}) == "/: 'path' is a required property"
    assert check_arguments(contract, {"path": 7}) == "/path: 7 is not of type 'string'"
    assert contract.output_problem({"content": "hello"}) is None
    assert contract.output_problem({"content": "x", "extra": 1}) is not None
    assert contract.input_schema == READ_INPUT
    assert contract.output_schema == READ_OUTPUT


def test_a_declared_contract_without_an_output_schema_records_any_output() -> None:
    contract = declared(declared_output=None)

    assert contract.output_schema is None
    assert contract.output_problem({"anything": [1, 2]}) is None


def test_the_inputs_of_a_declared_contract_are_its_schemas_properties() -> None:
    contract = declared()

    assert contract.input_fields == frozenset({"path", "head"})
    assert contract.proposable == frozenset({"head"})
    assert contract.run_bindings == (RunBinding("path", "root", BindingMatch.PATH_WITHIN),)


def test_a_run_bound_field_without_a_resource_key_binds_to_its_own_name_by_equality() -> None:
    contract = declared(resource_keys=())

    assert contract.run_bindings == (RunBinding("path", "path", BindingMatch.EQUALS),)


def test_a_declared_contract_refuses_a_bound_field_its_schema_does_not_take() -> None:
    with pytest.raises(ValueError, match=r"bound fields \['root'\] are not inputs"):
        declared(run_bound=frozenset({"root"}), resource_keys=())


def test_a_write_whose_intent_names_an_argument_its_schema_does_not_take_is_refused() -> None:
    daily = OperationSpec(intent=Intent(arguments=("path", "recipient"), window_s=86400))

    with pytest.raises(ValueError, match=r"intent arguments \['recipient'\] are not inputs"):
        declared(risk=Risk.REVERSIBLE_WRITE, operation=daily)
    narrowed = declared(
        risk=Risk.REVERSIBLE_WRITE, operation=OperationSpec(intent=Intent(arguments=("path",)))
    )
    assert narrowed.operation is not None


def test_a_resource_key_for_a_field_that_is_not_run_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=r"resource keys for \['head'\]"):
        declared(resource_keys=(RunBinding("head", "root"),))


def test_a_contract_needs_exactly_one_input_shape() -> None:
    with pytest.raises(ValueError, match="exactly one of input_model and declared_input"):
        declared(declared_input=None)


def test_the_stand_in_model_of_a_declared_contract_refuses_to_validate() -> None:
    contract = declared()

    assert contract.input_model is DeclaredBySchema
    with pytest.raises(TypeError, match="input_problem"):
        contract.input_model.model_validate({"path": "/etc/passwd"})


def test_declared_contracts_are_hashable_values_that_survive_pickling() -> None:
    reordered = dict(reversed(list(READ_INPUT.items())))

    assert declared() == declared(declared_input=JsonSchema.of(reordered))
    assert hash(declared()) == hash(declared(declared_input=JsonSchema.of(reordered)))
    assert declared() != declared(declared_output=None)
    assert pickle.loads(pickle.dumps(declared())) == declared()


@pytest.mark.parametrize("document", [{"type": 12}, ["not", "a", "schema"], {"required": "path"}])
def test_a_document_that_is_not_a_valid_schema_is_refused(document: Any) -> None:
    with pytest.raises(SchemaInvalid):
        JsonSchema.of(document)


def test_a_schema_without_a_dialect_is_read_as_draft_2020_12() -> None:
    # prefixItems exists only since 2020-12: under draft-07 it would be an unknown, ignored keyword.
    schema = JsonSchema.of({"type": "array", "prefixItems": [{"type": "string"}]})

    assert schema.first_problem(["a"]) is None
    assert schema.first_problem([1]) == "/0: 1 is not of type 'string'"


@pytest.mark.parametrize(
    ("value", "root", "admitted"),
    [
        ("/srv/reports", "/srv/reports", True),
        ("/srv/reports/a/b.txt", "/srv/reports", True),
        ("/srv/reports/a/b.txt", "/srv/reports/", False),  # a root not in normal form admits nothing
        ("/srv/reports/../secrets", "/srv/reports", False),
        ("/srv/reports-old/a.txt", "/srv/reports", False),
        ("reports/a.txt", "/srv/reports", False),
        ("/srv/reports/a\x00.txt", "/srv/reports", False),
        (["/srv/reports"], "/srv/reports", False),
        ("/etc/passwd", "/srv/reports", False),
    ],
)
def test_a_path_binding_admits_only_absolute_paths_at_or_under_the_root(
    value: object, root: str, admitted: bool
) -> None:
    assert RunBinding("path", "root", BindingMatch.PATH_WITHIN).admits(value, root) is admitted


def test_an_equality_binding_admits_only_the_resource_value() -> None:
    binding = RunBinding("case_id", "case_id")

    assert binding.admits("C-102", "C-102")
    assert not binding.admits("C-103", "C-102")


def test_a_declared_pattern_is_matched_as_ecma_262_where_dollar_ends_the_text() -> None:
    schema = JsonSchema.of({"type": "string", "pattern": "^[A-Z0-9-]+$"})

    assert schema.first_problem("C-102") is None
    assert schema.first_problem("C-102\n") == "/: 'C-102\\n' does not match '^[A-Z0-9-]+$'"


def test_a_declared_pattern_uses_ecma_unicode_classes() -> None:
    schema = JsonSchema.of({"type": "string", "pattern": "^\\p{L}+$"})

    assert schema.first_problem("héllo") is None
    assert schema.first_problem("h3llo") is not None

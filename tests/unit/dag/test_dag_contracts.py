"""``ToolContract``: a tool's declared contract refuses bound fields it does not take, and derives the rest."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import BaseModel, ConfigDict

from dag.contracts import INVESTIGATE, Recording, Risk, ToolContract, catalogue_of


class DocumentInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str
    document_id: str
    note: str = ""


class Output(BaseModel):
    case_id: str


def contract(**changes: object) -> ToolContract:
    fields: dict[str, object] = {
        "name": "resolve",
        "version": "1.0.0",
        "description": "resolve a document",
        "scope": "documents:read",
        "risk": Risk.READ_ONLY,
        "input_model": DocumentInput,
        "output_model": Output,
        **changes,
    }
    return ToolContract(**fields)


def test_a_contract_has_the_documented_defaults() -> None:
    made = contract()

    assert made.run_bound == frozenset()  # the core binds nothing to a run unless a toolset says so
    assert made.observed_bound == frozenset()
    assert made.stages == frozenset({INVESTIGATE})
    assert (made.timeout_s, made.max_attempts, made.recording) == (10.0, 3, Recording.FULL)


def test_the_proposable_fields_are_the_inputs_neither_run_bound_nor_observed_bound() -> None:
    made = contract(run_bound=frozenset({"case_id"}), observed_bound=frozenset({"document_id"}))

    assert made.proposable == frozenset({"note"})


@pytest.mark.parametrize(
    ("risk", "idempotent"),
    [(Risk.READ_ONLY, True), (Risk.REVERSIBLE_WRITE, False), (Risk.IRREVERSIBLE_WRITE, False)],
)
def test_only_a_read_only_tool_is_idempotent(risk: Risk, idempotent: bool) -> None:
    assert contract(risk=risk).idempotent is idempotent


@pytest.mark.parametrize("field", ["run_bound", "observed_bound"])
def test_a_bound_field_that_is_not_an_input_is_refused(field: str) -> None:
    with pytest.raises(ValueError, match=r"resolve: bound fields \['claim_id'\] are not inputs"):
        contract(**{field: frozenset({"case_id", "claim_id"})})


@pytest.mark.parametrize("changes", [{"max_attempts": 0}, {"timeout_s": 0.0}, {"timeout_s": -1.0}])
def test_a_contract_without_an_attempt_or_without_time_is_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="max_attempts must be >= 1 and timeout_s > 0"):
        contract(**changes)


def test_replacing_a_field_validates_the_new_contract_too() -> None:
    with pytest.raises(ValueError, match="not inputs"):
        dataclasses.replace(contract(), run_bound=frozenset({"claim_id"}))


def test_a_catalogue_refuses_two_contracts_with_one_name() -> None:
    with pytest.raises(ValueError, match="duplicate tool contract 'resolve'"):
        catalogue_of(contract(), contract(version="2.0.0"))

"""``action_fingerprint``: identical actions hash identically whatever the key order; different ones do not."""

from __future__ import annotations

import hashlib
from typing import Any

from dag_run_builders import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from dag.fingerprint import action_fingerprint, canonical_json

TOOL = "caseops_resolve_document_alias"

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def with_keys_reversed(value: Any) -> Any:
    """The same JSON value with every object's keys in the opposite insertion order."""
    if isinstance(value, dict):
        return {key: with_keys_reversed(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [with_keys_reversed(child) for child in value]
    return value


def test_key_order_does_not_change_the_fingerprint() -> None:
    first = action_fingerprint(TOOL, {"case_id": "C-102", "document_id": "D-1", "opts": {"a": 1, "b": 2}})
    second = action_fingerprint(TOOL, {"opts": {"b": 2, "a": 1}, "document_id": "D-1", "case_id": "C-102"})

    assert first == second


@PROPERTY_SETTINGS
@given(args=json_objects)
def test_reversing_the_keys_of_every_object_keeps_the_fingerprint(args: dict[str, Any]) -> None:
    assert action_fingerprint(TOOL, with_keys_reversed(args)) == action_fingerprint(TOOL, args)


def test_different_arguments_give_different_fingerprints() -> None:
    base = action_fingerprint(TOOL, {"case_id": "C-102", "document_id": "D-1"})

    assert action_fingerprint(TOOL, {"case_id": "C-102", "document_id": "D-2"}) != base
    assert action_fingerprint(TOOL, {"case_id": "C-102", "document_id": "D-1", "x": None}) != base
    assert action_fingerprint(TOOL, {"case_id": "C-102", "document_id": ["D-1"]}) != base


def test_the_same_arguments_for_another_tool_give_another_fingerprint() -> None:
    args = {"case_id": "C-102"}

    assert action_fingerprint("caseops_get_case_snapshot", args) != action_fingerprint(
        "caseops_get_policy_requirements", args
    )


def test_a_string_and_a_number_with_the_same_digits_differ() -> None:
    assert action_fingerprint(TOOL, {"version": 1}) != action_fingerprint(TOOL, {"version": "1"})


def test_non_ascii_arguments_hash_their_utf8_canonical_json() -> None:
    args = {"source_label": "診断書（原本）", "case_id": "C-102"}

    expected_json = '{"args":{"case_id":"C-102","source_label":"診断書（原本）"},"tool":"' + TOOL + '"}'
    assert canonical_json({"tool": TOOL, "args": args}) == expected_json
    assert action_fingerprint(TOOL, args) == hashlib.sha256(expected_json.encode("utf-8")).hexdigest()


def test_the_fingerprint_is_a_sha256_hex_digest() -> None:
    fingerprint = action_fingerprint(TOOL, {"case_id": "C-102"})

    assert len(fingerprint) == 64
    assert set(fingerprint) <= set("0123456789abcdef")

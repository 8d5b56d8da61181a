"""``dag.refs``: finding references in arguments, and replacing them with the data they name."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dag.errors import ReferenceUnresolved
from dag.refs import ItemRef, NodeRef, format_path, iter_references, resolve_args, resolve_pointer

NESTED_ARGS: dict[str, Any] = {
    "case_id": "C-102",
    "documents": [
        {"id": {"$ref": "docs", "pointer": "/documents/0/document_id"}},
        {"$item": "/document_id"},
        ["literal", {"deeper": {"$ref": "case"}}],
    ],
    "filter": {"policy": {"$ref": "policy", "pointer": "/policy_id"}, "limit": 3},
}

OUTPUTS: dict[str, Any] = {
    "case": {"case_id": "C-102", "version": 4},
    "docs": {"documents": [{"document_id": "D-1"}, {"document_id": "D-2"}]},
    "policy": {"policy_id": "P-9", "weird/key": {"~tilde": "found"}},
}


def test_iter_references_finds_every_nested_reference_with_its_path_in_order() -> None:
    found = list(iter_references(NESTED_ARGS, node_id="n"))

    assert found == [
        (("documents", 0, "id"), NodeRef("docs", "/documents/0/document_id")),
        (("documents", 1), ItemRef("/document_id")),
        (("documents", 2, 1, "deeper"), NodeRef("case", "")),
        (("filter", "policy"), NodeRef("policy", "/policy_id")),
    ]


def test_iter_references_does_not_look_inside_a_reference() -> None:
    found = list(iter_references({"a": {"$ref": "x", "pointer": "/y"}}, node_id="n"))

    assert found == [(("a",), NodeRef("x", "/y"))]


def test_iter_references_finds_nothing_in_literal_arguments() -> None:
    assert list(iter_references({"case_id": "C-1", "tags": ["a", {"b": 1}]}, node_id="n")) == []


def test_resolve_args_replaces_references_in_nested_lists_and_objects() -> None:
    resolved = resolve_args(NESTED_ARGS, OUTPUTS, node_id="n", item={"document_id": "D-7"})

    assert resolved == {
        "case_id": "C-102",
        "documents": [
            {"id": "D-1"},
            "D-7",
            ["literal", {"deeper": {"case_id": "C-102", "version": 4}}],
        ],
        "filter": {"policy": "P-9", "limit": 3},
    }


def test_resolve_args_leaves_its_input_unchanged() -> None:
    before = copy.deepcopy(NESTED_ARGS)

    resolve_args(NESTED_ARGS, OUTPUTS, node_id="n", item={"document_id": "D-7"})

    assert before == NESTED_ARGS


def test_an_empty_item_pointer_names_the_whole_item() -> None:
    resolved = resolve_args({"document_id": {"$item": ""}}, {}, node_id="n", item="D-3")

    assert resolved == {"document_id": "D-3"}


def test_an_item_reference_without_an_item_is_a_caller_bug() -> None:
    with pytest.raises(KeyError, match=r"\$item outside for_each"):
        resolve_args({"document_id": {"$item": ""}}, {}, node_id="n")


@pytest.mark.parametrize(
    ("document", "pointer"),
    [
        ({"a": 1}, "/b"),
        ([1, 2], "/2"),
        ([1, 2], "/01"),
        ([1, 2], "/x"),
        ({"a": 1}, "/a/b"),
        ({"a": "text"}, "/a/0"),
        (None, "/a"),
    ],
)
def test_a_pointer_naming_nothing_raises_reference_unresolved(document: Any, pointer: str) -> None:
    with pytest.raises(ReferenceUnresolved) as caught:
        resolve_pointer(document, pointer, node_id="docs")

    assert (caught.value.node_id, caught.value.pointer) == ("docs", pointer)
    assert "'docs'" in str(caught.value)


def test_the_end_of_list_pointer_names_nothing_when_reading() -> None:
    # RFC 6901 §4: "-" names the (nonexistent) element after the last one, so reading it is an error.
    with pytest.raises(ReferenceUnresolved):
        resolve_pointer({"documents": [{"document_id": "D-1"}]}, "/documents/-", node_id="docs")


def test_resolve_args_raises_reference_unresolved_for_a_missing_output_part() -> None:
    with pytest.raises(ReferenceUnresolved) as caught:
        resolve_args({"x": [{"$ref": "case", "pointer": "/policy_id"}]}, OUTPUTS, node_id="n")

    assert (caught.value.node_id, caught.value.pointer) == ("case", "/policy_id")


def test_an_unresolved_item_pointer_names_the_for_each_item() -> None:
    with pytest.raises(ReferenceUnresolved) as caught:
        resolve_args({"x": {"$item": "/document_id"}}, {}, node_id="n", item={"id": "D-1"})

    assert caught.value.node_id is None
    assert "for_each item" in str(caught.value)


@pytest.mark.parametrize(
    ("pointer", "expected"),
    [
        ("/weird~1key/~0tilde", "found"),
        ("/weird~1key", {"~tilde": "found"}),
    ],
)
def test_json_pointer_escapes_name_slashes_and_tildes_in_keys(pointer: str, expected: Any) -> None:
    assert resolve_pointer(OUTPUTS["policy"], pointer, node_id="policy") == expected


def test_json_pointer_unescapes_tilde_one_before_tilde_zero() -> None:
    # "~01" is "~" then "1", never "/": unescaping in the wrong order would look up "/".
    document = {"~1": "tilde-one", "/": "slash"}

    assert resolve_pointer(document, "/~01", node_id="n") == "tilde-one"


def test_format_path_escapes_tilde_before_slash() -> None:
    assert format_path(("a/b", "m~n", "~1", 0)) == "/args/a~1b/m~0n/~01/0"
    assert format_path(()) == "/args"


def test_a_formatted_path_resolves_back_to_the_same_value() -> None:
    args = {"a/b": {"m~n": ["x", "target"]}}
    pointer = format_path(("a/b", "m~n", 1)).removeprefix("/args")

    assert resolve_pointer(args, pointer, node_id="n") == "target"

"""Values a run can record: what is refused (outputs, request bodies) and what is made storable (messages)."""

from __future__ import annotations

import pytest

from dag.events import ErrorKind, NodeError
from dag.storable import storable_text, unfit_values


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"goal": "a\x00b"}, [("/goal", "NUL")]),
        ({"goal": "a\ud800"}, [("/goal", "surrogate")]),
        ({"plan": {"x": [1, float("nan")]}}, [("/plan/x/1", "finite")]),
        ({"plan": {"x": float("inf")}}, [("/plan/x", "finite")]),
        ({"plan": {"a/b~c\x00": 1}}, [("/plan/a~1b~0c\x00", "NUL")]),
        ({"plan": {"ok": ["text", 1.5, None, True, {"日本": "語"}]}}, []),
        (
            {"a": ["\x00", {"k\x00": "\udc00"}], "b": float("-inf")},
            [("/a/0", "NUL"), ("/a/1/k\x00", "key"), ("/a/1/k\x00", "surrogate"), ("/b", "finite")],
        ),
    ],
    ids=["nul", "surrogate", "nan", "infinity", "key", "fine", "document-order"],
)
def test_unfit_values_are_named_by_json_pointer_in_document_order(
    value: object, found: list[tuple[str, str]]
) -> None:
    unfit = list(unfit_values(value))

    assert [pointer for pointer, _ in unfit] == [pointer for pointer, _ in found]
    for (_, reason), (_, word) in zip(unfit, found, strict=True):
        assert word in reason


def test_a_value_nested_past_any_recursion_limit_is_walked_without_recursing() -> None:
    deep: list[object] = []
    innermost = deep
    for _ in range(100_000):
        child: list[object] = []
        innermost.append(child)
        innermost = child
    innermost.append("\x00")

    [(pointer, reason)] = unfit_values(deep)

    assert pointer == "/0" * 100_001  # the lists, then the string at index 0 of the innermost
    assert "NUL" in reason


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("plain", "plain"),
        ("a\x00b", "a\ufffdb"),
        ("lone \ud800 and \udfff", "lone \ufffd and \ufffd"),
        ("kept: é, 日本, 😀", "kept: é, 日本, 😀"),
    ],
    ids=["ascii", "nul", "surrogates", "unicode"],
)
def test_storable_text_replaces_only_what_cannot_be_stored(text: str, stored: str) -> None:
    assert storable_text(text) == stored
    assert list(unfit_values(storable_text(text))) == []


def test_a_node_error_a_tool_worded_with_nul_is_recorded_with_a_replacement_character() -> None:
    error = NodeError(kind=ErrorKind.BUSINESS, code="BAD\x00CODE", message="the file says \x00\ud800")

    assert (error.code, error.message) == ("BAD\ufffdCODE", "the file says \ufffd\ufffd")
    assert list(unfit_values(error.model_dump(mode="json"))) == []
    assert NodeError.model_validate(error.model_dump(mode="json")) == error

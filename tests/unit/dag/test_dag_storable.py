"""Values a run can record: what is refused (outputs, request bodies) and what is made storable (messages)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dag.events import ErrorKind, NodeError
from dag.storable import MAX_DEPTH, nests_deeper_than, storable_text, unfit_values


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


def _nested(depth: int, innermost: object, container: type = list) -> object:
    """``innermost`` inside ``depth`` lists (or objects, each with one key ``k``), built without recursion."""
    value = innermost
    for _ in range(depth):
        value = [value] if container is list else {"k": value}
    return value


def test_a_value_nested_past_any_recursion_limit_is_refused_at_the_limit_and_the_rest_still_walked() -> None:
    value = {"deep": _nested(100_000, "\x00"), "fits": _nested(MAX_DEPTH - 1, "\x00"), "last": float("nan")}

    [(too_deep, reason), (nul, _), (nan, _)] = unfit_values(value)

    assert too_deep == "/deep" + "/0" * (
        MAX_DEPTH - 1
    )  # the first list too deep; nothing inside it is looked at
    assert str(MAX_DEPTH) in reason
    assert (nul, nan) == ("/fits" + "/0" * (MAX_DEPTH - 1), "/last")


@pytest.mark.parametrize("container", [list, dict])
def test_a_value_may_nest_max_depth_arrays_and_objects_and_no_more(container: type) -> None:
    step = "/0" if container is list else "/k"

    assert [pointer for pointer, _ in unfit_values(_nested(MAX_DEPTH, "\x00", container))] == [
        step * MAX_DEPTH  # the NUL, inside as many containers as may be
    ]
    [(pointer, reason)] = unfit_values({"fine": 1, "deep": _nested(MAX_DEPTH, "\x00", container)})
    assert (pointer, "nest deeper" in reason) == ("/deep" + step * (MAX_DEPTH - 1), True)


@pytest.mark.parametrize("container", [list, dict])
def test_nests_deeper_than_counts_the_value_itself_as_the_first_level(container: type) -> None:
    assert not nests_deeper_than(_nested(MAX_DEPTH, 1, container))
    assert nests_deeper_than(_nested(MAX_DEPTH + 1, 1, container))
    assert nests_deeper_than({"fine": [1, 2], "deep": _nested(100_000, 1, container)})  # no recursion limit
    assert not nests_deeper_than("text")
    assert not nests_deeper_than([], limit=1)
    assert nests_deeper_than([[]], limit=1)


@given(
    value=st.recursive(
        st.none() | st.integers() | st.text(max_size=3),
        lambda children: (
            st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=2), children, max_size=3)
        ),
        max_leaves=40,
    ),
    limit=st.integers(min_value=0, max_value=6),
)
def test_nests_deeper_than_agrees_with_unfit_values_on_depth(value: object, limit: int) -> None:
    """One rule for how deep a value nests, whichever of the two checks it."""
    wrapped = value
    for _ in range(MAX_DEPTH - limit):  # so that MAX_DEPTH, the only limit unfit_values knows, is ``limit``
        wrapped = [wrapped]
    too_deep = any("nest deeper" in reason for _, reason in unfit_values(wrapped))

    assert nests_deeper_than(value, limit) == too_deep


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

"""The API's body checks: nesting read from raw text without parsing, and values PostgreSQL cannot store."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.api import nests_deeper_than, unfit_values


def depth_of(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(child) for child in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(child) for child in value), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\a'), children, max_size=3)
    ),
    max_leaves=40,
)


@settings(max_examples=300, derandomize=True, database=None)
@given(value=json_values, limit=st.integers(min_value=0, max_value=8))
def test_nesting_read_from_the_text_is_the_parsed_values_depth(value: object, limit: int) -> None:
    text = json.dumps(value).encode()

    assert nests_deeper_than(text, limit) == (depth_of(value) > limit)


def test_a_nesting_far_past_any_recursion_limit_is_read_without_recursing() -> None:
    assert nests_deeper_than(b"[" * 1_000_000 + b"]" * 1_000_000, 32)
    assert nests_deeper_than(b"[" * 1_000_000, 32)  # unterminated: still too deep, not an error


def test_an_unterminated_string_of_escapes_is_read_in_linear_time() -> None:
    # Each escaped quote restarts no scan: two megabytes of them take one pass, not a quadratic one.
    assert not nests_deeper_than(b'"' + b'\\"' * 1_000_000 + b"[" * 40, 32)


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"goal": "a\x00b"}, [("/goal", "NUL")]),
        ({"goal": "a\ud800"}, [("/goal", "surrogate")]),
        ({"plan": {"x": [1, float("nan")]}}, [("/plan/x/1", "finite")]),
        ({"plan": {"x": float("inf")}}, [("/plan/x", "finite")]),
        ({"plan": {"a/b~c\x00": 1}}, [("/plan/a~1b~0c\x00", "NUL")]),
        ({"plan": {"ok": ["text", 1.5, None, True, {"日本": "語"}]}}, []),
    ],
    ids=["nul", "surrogate", "nan", "infinity", "key", "fine"],
)
def test_unfit_values_are_named_by_json_pointer(value: object, found: list[tuple[str, str]]) -> None:
    unfit = list(unfit_values(value))

    assert [pointer for pointer, _ in unfit] == [pointer for pointer, _ in found]
    for (_, reason), (_, word) in zip(unfit, found, strict=True):
        assert word in reason

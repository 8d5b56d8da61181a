"""The API's body check: nesting read from raw text without parsing (what a body may hold: test_dag_storable)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.api import nests_deeper_than


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

"""``events_to_json_text``: the text an append stores holds exactly the values of ``event_to_json``."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

from dag_run_builders import AT, PROPERTY_SETTINGS, dispatched, run_created, succeeded
from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from dag.events import (
    NodeFailed,
    RunCreated,
    RunEvent,
    RunFinished,
    event_from_json,
    event_to_json,
    events_to_json_text,
)
from dag.states import RunStatus, StopReason
from dag.storable import unfit_values

# What a tool may answer and a run may record: any JSON that ``unfit_values`` lets through.
storable_text = st.text(max_size=12).filter(lambda text: not list(unfit_values(text)))
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | storable_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(storable_text, inner, max_size=4),
    max_leaves=16,
)


def decoded(events: list[RunEvent]) -> list[object]:
    return json.loads(events_to_json_text(events))


@PROPERTY_SETTINGS
@given(output=json_values, args=st.dictionaries(storable_text, json_values, max_size=4))
def test_the_text_holds_the_values_of_event_to_json(output: JsonValue, args: dict[str, JsonValue]) -> None:
    events: list[RunEvent] = [dispatched("n", "tool", args), succeeded("n", output)]

    assert decoded(events) == [event_to_json(event) for event in events]


def test_times_numbers_and_text_keep_their_values() -> None:
    minus_five = timezone(timedelta(hours=-5))
    events: list[RunEvent] = [
        run_created(),
        succeeded("n", {"big": 2**70, "small": -(2**70), "tiny": 5e-324, "huge": 1.7976931348623157e308}),
        succeeded("m", {"text": 'é ✓ 𝄞 \u2028 "quoted" \\ \t', "nested": [[[{"a": [None, True, 0.1]}]]]}),
        NodeFailed.model_validate(
            {
                "at": datetime(2026, 12, 3, 7, 0, 0, 123456, tzinfo=minus_five),
                "node_id": "n",
                "error": {"kind": "business", "code": "E_BOOM", "message": "boom"},
                "started_at": AT,
                "finished_at": datetime(2026, 12, 3, tzinfo=UTC),
            }
        ),
        RunFinished(at=AT, status=RunStatus.FAILED, stop_reason=StopReason.EVIDENCE_INCOMPLETE, detail="d"),
    ]

    assert decoded(events) == [event_to_json(event) for event in events]
    assert [event_from_json(value) for value in decoded(events)] == events


def test_no_events_make_an_empty_array() -> None:
    assert decoded([]) == []


def test_a_number_that_cannot_be_stored_is_written_as_itself_not_as_null() -> None:
    # PostgreSQL refuses NaN and Infinity in jsonb, so the append fails rather than record something else.
    events: list[RunEvent] = [
        succeeded("n", {"x": float("inf")}),
        succeeded("m", [float("-inf"), float("nan")]),
    ]

    text = events_to_json_text(events)

    assert "null" not in text
    assert decoded(events)[0]["output"] == {"x": float("inf")}  # type: ignore[index]


def test_a_value_nested_as_deep_as_an_event_can_hold_is_encoded_all_the_same() -> None:
    deepest: JsonValue = 1
    for _ in range(254):  # the deepest the event's validator builds
        deepest = [deepest]
    # A proposal is recorded as the caller sent it when its tool's server is not listed yet.
    proposed = RunCreated.model_validate({**run_created().model_dump(), "proposal": {"a": deepest}})
    events: list[RunEvent] = [proposed]

    assert decoded(events) == [event_to_json(event) for event in events]

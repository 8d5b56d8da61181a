"""A page's cursor is opaque to clients and checked when it comes back: a listing's own cursor names where its
last page ended, and anything else — another listing's, a forged or garbled one — is a 422, never a 5xx."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from actors.api._problem import Problem
from actors.api.pages import pending_cursor, pending_key, resource_filter, run_cursor, run_key
from actors.store.listing import PendingKey, RunKey

AT = datetime(2026, 12, 6, 5, 0, 0, 123456, tzinfo=UTC)


def forged(position: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def test_a_listings_cursor_comes_back_as_the_position_it_names() -> None:
    runs = RunKey(AT, "00000000-0000-4000-8000-000000000002")
    waits = PendingKey(AT, "r:00000000-0000-4000-8000-000000000002:0000000001:" + "a" * 64)
    unknown = PendingKey(None, "o:00000000-0000-4000-8000-000000000001")

    assert run_key(run_cursor(runs)) == runs
    assert pending_key(pending_cursor(waits)) == waits
    assert pending_key(pending_cursor(unknown)) == unknown
    assert run_key(None) is None


@pytest.mark.parametrize(
    "cursor",
    [
        pending_cursor(PendingKey(None, "o:1")),  # the inbox's, given to the runs
        forged(["runs", "yesterday", "00000000-0000-4000-8000-000000000002"]),
        forged(["runs", "2026-12-06T05:00:00", "00000000-0000-4000-8000-000000000002"]),  # no offset
        forged(["runs", "0001-01-01T00:00:00+01:00", "00000000-0000-4000-8000-000000000002"]),
        forged(["runs", AT.isoformat(), "not-a-run"]),
        forged({"runs": 1}),
        "A",
        "bm90IGpzb24",
    ],
    ids=[
        "other-listing",
        "not-a-moment",
        "no-offset",
        "before-utc-begins",
        "not-a-run-id",
        "object",
        "short",
        "not-json",
    ],
)
def test_what_is_not_a_cursor_of_the_runs_is_a_422(cursor: str) -> None:
    with pytest.raises(Problem) as refused:
        run_key(cursor)

    assert (refused.value.status, refused.value.slug) == (422, "invalid-request")
    assert refused.value.extra["errors"][0]["location"] == "/query/cursor"


def test_an_inbox_cursor_holds_a_key_of_the_inbox_only() -> None:
    with pytest.raises(Problem):
        pending_key(forged(["decisions", None, "x'; DROP TABLE runs"]))
    with pytest.raises(Problem):
        pending_key(run_cursor(RunKey(AT, "00000000-0000-4000-8000-000000000002")))


def test_a_resource_filter_joins_its_pairs_and_refuses_a_key_given_two_values() -> None:
    assert resource_filter(["root:/srv/a:b", "case_id:C-1"], None) == {"root": "/srv/a:b", "case_id": "C-1"}
    assert resource_filter(["case_id:C-1"], "C-1") == {"case_id": "C-1"}
    with pytest.raises(Problem):
        resource_filter(["case_id:C-1"], "C-2")

"""``GET /runs`` over the real API: a tenant's runs, newest first, only those the key may read, filtered by
state (``waiting`` among them), resource and creation time, a page at a time after a cursor that later runs do
not disturb. Each test reads only the runs it created (``created_after`` its own start)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, NO_DOCUMENTS_KEY, OTHER_KEY, auth
from tests.integration.test_api import assert_problem
from tests.integration.test_operations import wait_for, waiting


def created(client: httpx.Client, body: dict[str, Any], key: str = DEMO_KEY) -> dict[str, Any]:
    response = client.post("/runs", params={"wait": 60}, json=body, headers=auth(key))
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    return run


def listed(client: httpx.Client, key: str = DEMO_KEY, **query: Any) -> dict[str, Any]:
    response = client.get("/runs", params=query, headers=auth(key))
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def ids(page: dict[str, Any]) -> list[str]:
    return [run["run_id"] for run in page["items"]]


def every_page(client: httpx.Client, **query: Any) -> list[list[str]]:
    """The run ids of each page, following ``next`` to the end (from ``query``'s ``cursor``, if it has one)."""
    pages = []
    while True:
        page = listed(client, **query)
        pages.append(ids(page))
        query["cursor"] = page["next"]
        if query["cursor"] is None:
            return pages


@pytest.fixture
def since() -> str:
    """This test's start: every run it lists was created after it."""
    return (datetime.now(UTC) - timedelta(milliseconds=1)).isoformat()


@pytest.fixture
def reviewed(client: httpx.Client) -> Iterator[dict[str, Any]]:
    """A run of tenant-demo waiting for its plan's review (cancelled afterwards)."""
    response = client.post("/runs", json={"case_id": "C-101", "review": "plan"}, headers=auth(DEMO_KEY))
    assert response.status_code == 201, response.text
    run = wait_for(client, response.json()["run_id"], waiting)
    yield run
    client.post(f"/runs/{run['run_id']}/cancel", headers=auth(DEMO_KEY))


def test_a_tenant_lists_its_readable_runs_newest_first_and_filters_them(
    client: httpx.Client, since: str
) -> None:
    first = created(client, {"case_id": "C-102"})
    other_case = created(client, {"case_id": "C-104"})
    foreign = created(client, {"case_id": "C-201"}, key=OTHER_KEY)
    last = created(client, {"case_id": "C-102"})

    mine = listed(client, created_after=since)
    assert ids(mine) == [last["run_id"], other_case["run_id"], first["run_id"]]
    assert mine["next"] is None
    summary = mine["items"][0]
    assert summary == {key: last[key] for key in summary}  # the run's own fields, as GET /runs/{id} has them
    assert "result" not in summary
    assert "plan" not in summary
    assert ids(listed(client, key=OTHER_KEY, created_after=since)) == [foreign["run_id"]]
    # A key lacking scopes the runs were created with reads none of them, as GET /runs/{id} answers 404.
    assert ids(listed(client, key=NO_DOCUMENTS_KEY, created_after=since)) == []
    assert client.get(f"/runs/{first['run_id']}", headers=auth(NO_DOCUMENTS_KEY)).status_code == 404

    assert ids(listed(client, created_after=since, case_id="C-104")) == [other_case["run_id"]]
    assert ids(listed(client, created_after=since, resource="case_id:C-102")) == [
        last["run_id"],
        first["run_id"],
    ]
    assert ids(listed(client, created_after=since, created_before=other_case["created_at"])) == [
        first["run_id"]
    ]
    assert ids(listed(client, created_after=last["created_at"])) == [last["run_id"]]
    completed = [run["run_id"] for run in mine["items"] if run["status"] == "completed"]
    assert last["run_id"] in completed
    assert ids(listed(client, created_after=since, status="completed")) == completed
    assert ids(listed(client, created_after=since, status="failed")) == []


def test_waiting_runs_are_listed_by_their_state(
    client: httpx.Client, since: str, reviewed: dict[str, Any]
) -> None:
    done = created(client, {"case_id": "C-102"})

    assert ids(listed(client, created_after=since, status="waiting")) == [reviewed["run_id"]]
    assert ids(listed(client, created_after=since, status=["waiting", "completed"])) == [
        done["run_id"],
        reviewed["run_id"],
    ]
    # The approver reads the tenant's runs too: it holds every scope they were created with.
    assert reviewed["run_id"] in ids(listed(client, key=APPROVER_KEY, created_after=since, status="waiting"))


def test_pages_follow_each_other_without_a_repeat_or_a_gap_while_runs_are_created(
    client: httpx.Client, since: str
) -> None:
    runs = [created(client, {"case_id": "C-102"})["run_id"] for _ in range(5)]

    first = listed(client, created_after=since, limit=2)
    assert ids(first) == runs[::-1][:2]
    newer = created(client, {"case_id": "C-102"})["run_id"]  # created between two pages
    rest = every_page(client, created_after=since, limit=2, cursor=first["next"])

    assert [run for page in rest for run in page] == runs[::-1][2:]  # after the cursor: as it was
    assert [len(page) for page in rest] == [2, 1]
    assert [run for page in every_page(client, created_after=since, limit=2) for run in page] == [
        newer,
        *runs[::-1],
    ]


@pytest.mark.parametrize(
    ("query", "location"),
    [
        ({"status": "sleeping"}, "/query/status/0"),
        ({"limit": 0}, "/query/limit"),
        ({"limit": 201}, "/query/limit"),
        ({"cursor": "bm90LWEtY3Vyc29y"}, "/query/cursor"),
        ({"cursor": "not a cursor"}, "/query/cursor"),
        ({"created_after": "2026-12-01T00:00:00"}, "/query/created_after"),
        ({"created_before": "0001-01-01T00:00:00+01:00"}, "/query/created_before"),
        ({"resource": "no pair"}, "/query/resource/0"),
        ({"resource": "case_id:\x00"}, "/query/resource/0"),
        ({"resource": ["case_id:C-101", "case_id:C-102"]}, "/query/resource"),
        ({"case_id": "C 102"}, "/query/case_id"),
    ],
    ids=[
        "unknown-status",
        "limit-zero",
        "limit-too-large",
        "forged-cursor",
        "cursor-not-base64",
        "moment-without-offset",
        "moment-before-the-calendar-in-utc",
        "resource-not-a-pair",
        "resource-nul",
        "resource-key-twice",
        "bad-case-id",
    ],
)
def test_a_bad_filter_is_a_422_naming_it(client: httpx.Client, query: dict[str, Any], location: str) -> None:
    response = client.get("/runs", params=query, headers=auth(DEMO_KEY))

    problem = assert_problem(response, 422, "invalid-request")
    assert location in [error["location"] for error in problem["errors"]], problem


def test_a_cursor_of_the_inbox_is_no_cursor_of_the_runs(client: httpx.Client) -> None:
    import base64
    import json

    inbox_cursor = (
        base64.urlsafe_b64encode(json.dumps(["decisions", None, "o:1"]).encode()).decode().rstrip("=")
    )

    assert_problem(
        client.get("/runs", params={"cursor": inbox_cursor}, headers=auth(DEMO_KEY)), 422, "invalid-request"
    )
    assert_problem(client.get("/runs", headers=auth("not-a-key")), 401, "unauthorized")

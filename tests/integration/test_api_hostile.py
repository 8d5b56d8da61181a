"""Hostile input through the Serve app over real HTTP: each is a 4xx problem, never a 5xx, and saves nothing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
import httpx
import pytest

from actors.store.runs import MAX_SEQ
from dag.plan import MAX_JSON_DEPTH
from tests.integration.conftest import DEMO_KEY, NO_DOCUMENTS_KEY, auth

C102_PLAN_NODE = {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}}


def post_raw(client: httpx.Client, text: str, *, key: str = DEMO_KEY, **headers: str) -> httpx.Response:
    """``POST /runs`` with ``text`` exactly as given (JSON that ``json=`` could not send: NaN, lone surrogates)."""
    return client.post(
        "/runs",
        content=text.encode(),
        headers={**auth(key), "Content-Type": "application/json", **headers},
    )


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"] == f"https://raydag.dev/problems/{slug}"
    return body


async def runs_with_key(dsn: str, key: str) -> int:
    connection = await asyncpg.connect(dsn)
    try:
        count: int = await connection.fetchval("SELECT count(*) FROM runs WHERE idempotency_key = $1", key)
        return count
    finally:
        await connection.close()


@pytest.fixture
def fresh_key() -> str:
    return f"hostile-{uuid.uuid4()}"


@pytest.fixture
def finished_run(client: httpx.Client) -> str:
    response = client.post("/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY))
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    return run_id


# ------------------------------------------------------------------ A1: cursors past any sequence number


@pytest.mark.parametrize("after", [MAX_SEQ + 1, 2**63, 10**30])
def test_an_events_cursor_past_any_sequence_number_is_a_422(
    client: httpx.Client, finished_run: str, after: int
) -> None:
    response = client.get(f"/runs/{finished_run}/events", params={"after": after}, headers=auth(DEMO_KEY))

    problem = assert_problem(response, 422, "invalid-request")
    assert [error["location"] for error in problem["errors"]] == ["/query/after"]


def test_the_largest_events_cursor_is_an_empty_page(client: httpx.Client, finished_run: str) -> None:
    response = client.get(f"/runs/{finished_run}/events", params={"after": MAX_SEQ}, headers=auth(DEMO_KEY))

    assert response.status_code == 200, response.text
    assert response.json() == []


@pytest.mark.parametrize(
    ("params", "headers", "location"),
    [
        ({"after": MAX_SEQ + 1}, {}, "/query/after"),
        ({}, {"Last-Event-ID": str(MAX_SEQ + 1)}, "/header/Last-Event-ID"),
        ({}, {"Last-Event-ID": "123456789012345678"}, "/header/Last-Event-ID"),
    ],
    ids=["after", "last-event-id", "last-event-id-18-digits"],
)
def test_a_stream_cursor_past_any_sequence_number_is_a_422(
    client: httpx.Client, finished_run: str, params: dict[str, Any], headers: dict[str, str], location: str
) -> None:
    response = client.get(
        f"/runs/{finished_run}/stream", params=params, headers={**auth(DEMO_KEY), **headers}
    )

    problem = assert_problem(response, 422, "invalid-request")
    assert [error["location"] for error in problem["errors"]] == [location]


# ------------------------------------------------------------------ A1: a body that is not JSON


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ('{"case_id": "C-102", "goal": }', 29),
        ('{"case_id": "C-102"', 19),
        ("not json", 0),
        ('{"case_id": "C-102", "budgets": {"max_nodes": ' + "9" * 5000 + "}}", None),  # past int's digits
    ],
    ids=["missing-value", "unterminated", "not-json", "five-thousand-digits"],
)
async def test_a_body_that_is_not_json_is_a_400_naming_the_position_and_nothing_is_saved(
    client: httpx.Client, dsn: str, fresh_key: str, text: str, position: int | None
) -> None:
    response = post_raw(client, text, **{"Idempotency-Key": fresh_key})

    problem = assert_problem(response, 400, "invalid-json")
    assert problem.get("position") == position
    assert problem["detail"].startswith("the body is not valid JSON: ")
    assert "errors" not in problem  # no location that is not a JSON pointer
    assert await runs_with_key(dsn, fresh_key) == 0


# ------------------------------------------------------------------ A2: numbers JSON cannot carry


@pytest.mark.parametrize(
    ("text", "location"),
    [
        ('{"case_id": "C-102", "budgets": {"deadline_s": Infinity}}', "/body/budgets/deadline_s"),
        ('{"case_id": "C-102", "budgets": {"max_cost_usd": 1e999}}', "/body/budgets/max_cost_usd"),
        ('{"case_id": "C-102", "budgets": {"max_cost_usd": -Infinity}}', "/body/budgets/max_cost_usd"),
        ('{"case_id": "C-102", "budgets": {"deadline_s": NaN}}', "/body/budgets/deadline_s"),
        (
            '{"case_id": "C-102", "plan": {"nodes": [{"id": "case", "tool": "caseops_get_case_snapshot", '
            '"args": {"case_id": "C-102", "limit": NaN}}]}}',
            "/body/plan/nodes/0/args/limit",
        ),
        ('{"case_id": "C-102", "plan": {"nodes": [], "x": [1, 1e400]}}', "/body/plan/x/1"),
    ],
    ids=["infinity", "overflowing-literal", "minus-infinity", "nan", "nan-in-args", "overflow-in-plan"],
)
async def test_a_non_finite_number_is_a_422_naming_it_and_nothing_is_saved(
    client: httpx.Client, dsn: str, fresh_key: str, text: str, location: str
) -> None:
    response = post_raw(client, text, **{"Idempotency-Key": fresh_key})

    problem = assert_problem(response, 422, "invalid-request")
    assert location in [error["location"] for error in problem["errors"]]
    assert await runs_with_key(dsn, fresh_key) == 0


# ------------------------------------------------------------------ A3: text PostgreSQL cannot store


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"case_id": "C-102", "goal": "a\u0000b"}, "/body/goal"),
        ({"case_id": "C-102", "goal": "a\ud800b"}, "/body/goal"),
        ({"case_id": "C-102", "planner": "con\u0000formance"}, "/body/planner"),
        (
            {
                "case_id": "C-102",
                "plan": {
                    "nodes": [
                        {"id": "docs", "tool": "t", "for_each": {"$ref": "case", "pointer": "/x\u0000"}}
                    ]
                },
            },
            "/body/plan/nodes/0/for_each/pointer",
        ),
        (
            {"case_id": "C-102", "plan": {"nodes": [{**C102_PLAN_NODE, "args": {"case_id": "C-102\u0000"}}]}},
            "/body/plan/nodes/0/args/case_id",
        ),
        (
            {"case_id": "C-102", "plan": {"nodes": [{**C102_PLAN_NODE, "args": {"case\u0000id": "C-102"}}]}},
            "/body/plan/nodes/0/args/case\u0000id",
        ),
        ({"case_id": "C-102", "te\u0000nant": "x"}, "/body/te\u0000nant"),
    ],
    ids=["goal", "goal-lone-surrogate", "planner", "plan-pointer", "plan-arg", "plan-arg-key", "extra-key"],
)
async def test_unstorable_text_is_a_422_naming_its_location_and_nothing_is_saved(
    client: httpx.Client, dsn: str, fresh_key: str, body: dict[str, Any], location: str
) -> None:
    response = post_raw(client, json.dumps(body), **{"Idempotency-Key": fresh_key})

    problem = assert_problem(response, 422, "invalid-request")
    assert location in [error["location"] for error in problem["errors"]]
    assert await runs_with_key(dsn, fresh_key) == 0


# ------------------------------------------------------------------ A4: one nesting limit


def nested(depth: int) -> str:
    """A JSON value that nests ``depth`` levels: lists and objects alternating."""
    opened = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closed = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return opened + "1" + closed


def body_nesting(depth: int, where: str) -> str:
    """A POST /runs body whose total nesting is ``depth``, the deep part in plan args or in an extra key."""
    if where == "args":  # body{ plan{ nodes[ node{ args{ value: five levels before the value
        args = f'{{"case_id": "C-102", "x": {nested(depth - 5)}}}'
        node = f'{{"id": "case", "tool": "caseops_get_case_snapshot", "args": {args}}}'
        return f'{{"case_id": "C-102", "plan": {{"nodes": [{node}]}}}}'
    return f'{{"case_id": "C-102", "extra": {nested(depth - 1)}}}'


@pytest.mark.parametrize("where", ["args", "extra-key"])
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 200, 900, 1000, 5000, 100_000])
async def test_every_body_nested_past_the_limit_is_413_body_too_deep_and_saves_nothing(
    client: httpx.Client, dsn: str, fresh_key: str, depth: int, where: str
) -> None:
    response = post_raw(client, body_nesting(depth, where), **{"Idempotency-Key": fresh_key})

    problem = assert_problem(response, 413, "body-too-deep")
    assert str(MAX_JSON_DEPTH) in problem["detail"]
    assert await runs_with_key(dsn, fresh_key) == 0


def test_a_body_at_the_nesting_limit_passes_the_guard_to_validation(client: httpx.Client) -> None:
    response = post_raw(client, body_nesting(MAX_JSON_DEPTH, "extra-key"))

    problem = assert_problem(response, 422, "invalid-request")
    assert [error["location"] for error in problem["errors"]] == ["/body/extra"]


def test_brackets_inside_strings_do_not_count_as_nesting(client: httpx.Client) -> None:
    response = post_raw(client, json.dumps({"case_id": "C-102", "goal": "[{" * 1000, "extra": 1}))

    problem = assert_problem(response, 422, "invalid-request")
    assert [error["location"] for error in problem["errors"]] == ["/body/extra"]


# ------------------------------------------------------------------ A5: chunked bodies over the limit


def test_a_chunked_body_over_the_limit_is_413(client: httpx.Client) -> None:
    limit = 2 * 1024 * 1024
    chunk = b" " * 65536

    def chunks() -> Iterator[bytes]:
        yield b'{"case_id": "C-102", "goal": "'
        for _ in range(limit // len(chunk) + 1):
            yield chunk
        yield b'"}'

    response = client.post(
        "/runs", content=chunks(), headers={**auth(DEMO_KEY), "Content-Type": "application/json"}
    )

    assert_problem(response, 413, "body-too-large")


def test_a_chunked_body_under_the_limit_reaches_the_route(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"case_id": '
        yield b'"C-999"}'

    response = client.post(
        "/runs", content=chunks(), headers={**auth(DEMO_KEY), "Content-Type": "application/json"}
    )

    assert_problem(response, 404, "case-not-found")


# ------------------------------------------------------------------ A6: headers for browsers


def test_the_swagger_and_redoc_pages_are_off_and_the_openapi_document_stays(client: httpx.Client) -> None:
    assert_problem(client.get("/docs"), 404, "http-error")
    assert_problem(client.get("/redoc"), 404, "http-error")
    document = client.get("/openapi.json")
    assert document.status_code == 200
    assert document.json()["info"]["title"] == "raydag"


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("GET", "/healthz", None),
        ("GET", "/openapi.json", None),
        ("GET", "/runs/{run}", DEMO_KEY),
        ("GET", "/runs/{run}/events", DEMO_KEY),
        ("GET", "/runs/{run}/stream", DEMO_KEY),
        ("GET", "/runs/{run}", None),
        ("GET", f"/runs/{uuid.uuid4()}", DEMO_KEY),
        ("GET", "/runs/{run}/events?after=-1", DEMO_KEY),
        ("GET", "/no-such-route", None),
        ("POST", "/mcp", None),
    ],
    ids=["health", "openapi", "run", "events", "stream", "401", "404", "422", "unknown-route", "mcp"],
)
def test_every_answer_says_nosniff_and_forbids_active_content(
    client: httpx.Client, finished_run: str, method: str, path: str, key: str | None
) -> None:
    response = client.request(method, path.format(run=finished_run), headers=auth(key) if key else {})

    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_the_viewer_page_keeps_its_own_policy(client: httpx.Client, finished_run: str) -> None:
    response = client.get(f"/runs/{finished_run}/view")

    assert response.status_code == 200
    assert response.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'sha256-" in response.headers["content-security-policy"]


# ------------------------------------------------------------------ A7: a conflict names only a readable run


def test_a_409_omits_the_first_run_from_a_key_that_cannot_read_it(
    client: httpx.Client, fresh_key: str
) -> None:
    first = client.post(
        "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": fresh_key}
    )
    assert first.status_code == 201, first.text
    # Same tenant, fewer scopes: the run is invisible to this key (404 on GET), so the 409 must not name it.
    assert client.get(f"/runs/{first.json()['run_id']}", headers=auth(NO_DOCUMENTS_KEY)).status_code == 404

    conflict = client.post(
        "/runs", json={"case_id": "C-102"}, headers={**auth(NO_DOCUMENTS_KEY), "Idempotency-Key": fresh_key}
    )

    problem = assert_problem(conflict, 409, "idempotency-key-reused")
    assert "run_id" not in problem
    assert first.json()["run_id"] not in conflict.text


def test_a_409_names_the_first_run_to_a_key_that_can_read_it(client: httpx.Client, fresh_key: str) -> None:
    first = client.post(
        "/runs", json={"case_id": "C-102"}, headers={**auth(NO_DOCUMENTS_KEY), "Idempotency-Key": fresh_key}
    )
    assert first.status_code == 201, first.text

    conflict = client.post(
        "/runs", json={"case_id": "C-102"}, headers={**auth(DEMO_KEY), "Idempotency-Key": fresh_key}
    )

    problem = assert_problem(conflict, 409, "idempotency-key-reused")
    assert problem["run_id"] == first.json()["run_id"]

"""The run viewer over real HTTP: its page in Debian's headless Chromium (a finished C-102 run and a running
one; screenshots go to tests/artifacts/), its edges, and the live event stream it reads."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.c102 import C102_RESULT
from tests.conftest import REPO
from tests.integration.conftest import DEMO_KEY, OTHER_KEY, RunningToolServer, auth
from tests.integration.headless import Chromium

ARTIFACTS = REPO / "tests" / "artifacts"
C102_NODES = {"case", "policy", "docs", "resolve", "resolve[0]"}
ACTIVE = {"running", "retrying"}
SLOW_TOOL_MS = 20_000
"""Slower than the tools' timeout: a call stays in flight until it times out and is tried again."""


# ---- the browser ----


class DomElements(HTMLParser):
    """The start tags of a DOM: every element with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {name: value or "" for name, value in attrs}))

    def with_attribute(self, name: str) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.elements if name in attrs]

    def body(self) -> dict[str, str]:
        return next(attrs for tag, attrs in self.elements if tag == "body")


def save_screenshot(browser: Chromium, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.unlink(missing_ok=True)
    browser.screenshot(path)
    png = path.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (1400, 1000)
    return path


def view_url(api: str, run_id: str, key: str = DEMO_KEY) -> str:
    return f"{api}/runs/{run_id}/view#key={key}"


def node_statuses(dom: DomElements) -> dict[str, str]:
    return {attrs["data-node-id"]: attrs["data-status"] for attrs in dom.with_attribute("data-node-id")}


def bars(dom: DomElements) -> dict[str, set[str]]:
    """Each node's timeline bars: node id → the statuses of its bars."""
    found: dict[str, set[str]] = {}
    for attrs in dom.with_attribute("data-bar-for"):
        assert "bar" in attrs["class"].split()
        found.setdefault(attrs["data-bar-for"], set()).add(attrs["data-status"])
    return found


# ---- the API ----


def finished_c102(client: httpx.Client) -> dict[str, Any]:
    response = client.post("/runs", params={"wait": 60}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY))
    assert response.status_code == 201, response.text
    run: dict[str, Any] = response.json()
    assert run["status"] == "completed"
    return run


@pytest.fixture
def running_c102(client: httpx.Client, simulated: RunningToolServer) -> Iterator[str]:
    """A C-102 run whose first three calls are in flight; cancelled afterwards."""
    simulated.server.simulate(latency_ms=SLOW_TOOL_MS)
    response = client.post("/runs", json={"case_id": "C-102"}, headers=auth(DEMO_KEY))
    assert response.status_code == 201, response.text
    run_id: str = response.json()["run_id"]
    deadline = time.monotonic() + 60  # a bound against hanging, not a timing claim
    while True:
        nodes = client.get(f"/runs/{run_id}/nodes", headers=auth(DEMO_KEY)).json()
        if {node["node_id"] for node in nodes if node["status"] in ACTIVE} >= {"case", "policy", "docs"}:
            break
        assert time.monotonic() < deadline, nodes
        time.sleep(0.1)
    yield run_id
    client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))


def sse_messages(text: str) -> list[dict[str, str]]:
    """The messages of an SSE body (comments and ``retry`` lines are not messages)."""
    messages = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
        if "data" in fields:
            messages.append(fields)
    return messages


def read_stream(client: httpx.Client, run_id: str, **headers: str) -> tuple[httpx.Response, str]:
    """The whole stream of ``run_id``; it returns only because the stream ends."""
    with client.stream("GET", f"/runs/{run_id}/stream", headers={**auth(DEMO_KEY), **headers}) as response:
        return response, response.read().decode()


# ---- the page in a browser ----


def test_the_viewer_shows_a_finished_c102_runs_dag_timeline_ledger_and_result(
    api: str, client: httpx.Client, tmp_path: Path
) -> None:
    run = finished_c102(client)
    events = client.get(f"/runs/{run['run_id']}/events", headers=auth(DEMO_KEY)).json()

    with Chromium(tmp_path / "chromium") as browser:
        browser.open(view_url(api, run["run_id"]))
        browser.wait_for("document.body.dataset.stream === 'closed'")  # it ends after run_finished
        dom = DomElements(browser.dom())
        key_left_in_url = browser.evaluate("location.hash")
        save_screenshot(browser, "viewer-c102-finished.png")

    body = dom.body()
    assert body["data-ready"] == "true"
    assert body["data-run-status"] == "completed"
    assert key_left_in_url == ""
    assert node_statuses(dom) == dict.fromkeys(C102_NODES, "succeeded")
    assert bars(dom) == {node: {"succeeded"} for node in C102_NODES}
    edges = {attrs["data-edge"] for attrs in dom.with_attribute("data-edge")}
    assert edges == {"docs->resolve", "resolve->resolve[0]"}
    ledger = [
        (attrs["data-ledger-node"], attrs.get("data-attempt"))
        for attrs in dom.with_attribute("data-ledger-node")
    ]
    assert sorted(ledger) == [
        ("case", "1"),
        ("docs", "1"),
        ("policy", "1"),
        ("resolve", None),
        ("resolve[0]", "1"),
    ]
    refs = [attrs["data-evidence-ref"] for attrs in dom.with_attribute("data-evidence-ref")]
    assert refs == C102_RESULT["evidence_refs"]
    outcome = [attrs["data-outcome"] for attrs in dom.with_attribute("data-outcome")]
    assert outcome == [C102_RESULT["outcome"]]
    shown = sorted(int(attrs["data-seq"]) for attrs in dom.with_attribute("data-seq"))
    assert shown == [event["seq"] for event in events]


def test_the_viewer_shows_a_running_run_live_with_its_calls_in_flight(
    api: str, running_c102: str, tmp_path: Path
) -> None:
    with Chromium(tmp_path / "chromium") as browser:
        browser.open(view_url(api, running_c102))
        # Events have come through the live stream and been rendered.
        browser.wait_for("document.body.dataset.ready === 'true' && !!document.querySelector('[data-seq]')")
        dom = DomElements(browser.dom())
        save_screenshot(browser, "viewer-c102-running.png")

    body = dom.body()
    assert body["data-run-status"] == "running"
    assert body["data-stream"] == "open"
    statuses = node_statuses(dom)
    assert {statuses["case"], statuses["policy"], statuses["docs"]} <= ACTIVE
    assert statuses["resolve"] == "pending"  # waits for docs; not expanded yet
    assert "resolve[0]" not in statuses
    in_flight = [attrs for attrs in dom.with_attribute("data-bar-for") if "live" in attrs["class"].split()]
    assert {attrs["data-bar-for"] for attrs in in_flight} >= {"case", "policy", "docs"}


def test_the_page_is_static_and_served_without_a_key(client: httpx.Client) -> None:
    run = finished_c102(client)

    page = client.get(f"/runs/{run['run_id']}/view")
    other = client.get(f"/runs/{uuid.uuid4()}/view")

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert page.content == other.content  # no run data in it
    assert run["run_id"] not in page.text
    policy = page.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert page.headers["referrer-policy"] == "no-referrer"


# ---- the routes the page reads ----


def test_edges_are_the_plans_references_and_the_for_each_expansion(client: httpx.Client) -> None:
    run = finished_c102(client)

    edges = client.get(f"/runs/{run['run_id']}/edges", headers=auth(DEMO_KEY))

    assert edges.status_code == 200
    assert edges.json() == [
        {"source": "docs", "target": "resolve", "kind": "for_each"},
        {"source": "resolve", "target": "resolve[0]", "kind": "expands"},
    ]


def test_the_stream_replays_a_finished_runs_events_in_order_and_ends_after_run_finished(
    client: httpx.Client,
) -> None:
    run = finished_c102(client)
    events = client.get(f"/runs/{run['run_id']}/events", headers=auth(DEMO_KEY)).json()

    response, text = read_stream(client, run["run_id"])

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(text)
    assert [json.loads(message["data"]) for message in messages] == events
    assert [message["id"] for message in messages] == [str(event["seq"]) for event in events]
    assert [message["event"] for message in messages] == [event["kind"] for event in events]
    assert messages[-1]["event"] == "run_finished"


def test_the_stream_resumes_after_last_event_id_or_after(client: httpx.Client) -> None:
    run = finished_c102(client)
    last = len(client.get(f"/runs/{run['run_id']}/events", headers=auth(DEMO_KEY)).json())

    _, from_header = read_stream(client, run["run_id"], **{"Last-Event-ID": "5"})
    with client.stream(
        "GET", f"/runs/{run['run_id']}/stream", params={"after": 5}, headers=auth(DEMO_KEY)
    ) as response:
        from_query = response.read().decode()
    _, nothing_left = read_stream(client, run["run_id"], **{"Last-Event-ID": str(last)})

    assert [message["id"] for message in sse_messages(from_header)] == [
        str(seq) for seq in range(6, last + 1)
    ]
    assert sse_messages(from_query) == sse_messages(from_header)
    assert sse_messages(nothing_left) == []


def test_the_stream_of_a_running_run_delivers_events_as_recorded_until_run_finished(
    client: httpx.Client, simulated: RunningToolServer
) -> None:
    simulated.server.simulate(latency_ms=500)  # two dependent levels of calls: the run is live for a while
    created = client.post("/runs", json={"case_id": "C-102"}, headers=auth(DEMO_KEY)).json()
    assert created["status"] not in {"completed", "needs_human", "stopped", "failed", "cancelled"}

    _, text = read_stream(client, created["run_id"])

    messages = sse_messages(text)
    events = client.get(f"/runs/{created['run_id']}/events", headers=auth(DEMO_KEY)).json()
    assert [json.loads(message["data"]) for message in messages] == events
    assert messages[-1]["event"] == "run_finished"
    assert json.loads(messages[-1]["data"])["status"] == "completed"


@pytest.mark.parametrize("route", ["stream", "edges"])
def test_the_viewer_routes_need_a_key_and_hide_other_tenants_runs(client: httpx.Client, route: str) -> None:
    run = finished_c102(client)

    anonymous = client.get(f"/runs/{run['run_id']}/{route}")
    foreign = client.get(f"/runs/{run['run_id']}/{route}", headers=auth(OTHER_KEY))
    unknown = client.get(f"/runs/{uuid.uuid4()}/{route}", headers=auth(OTHER_KEY))

    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="raydag"'
    assert foreign.status_code == 404
    assert foreign.json()["type"].endswith("/run-not-found")
    assert foreign.json() | {"instance": None} == unknown.json() | {"instance": None}


def test_a_malformed_last_event_id_is_a_422(client: httpx.Client) -> None:
    run = finished_c102(client)

    response = client.get(
        f"/runs/{run['run_id']}/stream", headers={**auth(DEMO_KEY), "Last-Event-ID": "five"}
    )

    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"

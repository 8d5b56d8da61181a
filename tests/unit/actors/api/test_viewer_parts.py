"""The run viewer's pure parts: the DAG's edges, the SSE framing, and a page that loads nothing from elsewhere."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any

from actors.api.viewer import ViewerPage, run_edges, sse_message
from dag.budget import Budgets
from dag.events import JoinStarted, NodeExpanded, PlanAccepted, PlanningStarted, RunCreated, RunEvent
from dag.run_state import fold
from mcp_server.contracts import ALL_SCOPES

AT = datetime(2026, 7, 20, 9, 0, tzinfo=UTC)
FIRST_PLAN: dict[str, Any] = {
    "nodes": [
        {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}},
        {
            "id": "policy",
            "tool": "caseops_get_policy_requirements",
            "args": {"case_id": "C-102"},
            "after": ["case"],
        },
        {"id": "docs", "tool": "caseops_list_unclassified_documents", "args": {"case_id": "C-102"}},
        {
            "id": "resolve",
            "tool": "caseops_resolve_document_alias",
            "for_each": {"$ref": "docs", "pointer": "/documents"},
            "args": {
                "case_id": {"$ref": "case", "pointer": "/case_id"},
                "document_id": {"$item": "/document_id"},
            },
        },
    ]
}
REPLAN: dict[str, Any] = {
    "nodes": [
        {
            "id": "check",
            "tool": "caseops_resolve_document_alias",
            "args": {
                "case_id": "C-102",
                "document_id": {"$ref": "r1.docs", "pointer": "/documents/0/document_id"},
            },
        }
    ]
}


def two_rounds() -> list[RunEvent]:
    created = RunCreated(
        at=AT,
        run_id="run-1",
        tenant_id="tenant-a",
        subject="adjuster-7",
        scopes=ALL_SCOPES,
        resource={"case_id": "C-102"},
        goal="check the documents",
        planner="conformance",
        budgets=Budgets(),
    )
    return [
        created,
        PlanningStarted(at=AT, round=1),
        PlanAccepted(at=AT, round=1, plan=FIRST_PLAN),
        NodeExpanded(at=AT, node_id="resolve", count=2),
        JoinStarted(at=AT, round=1),
        PlanningStarted(at=AT, round=2),
        PlanAccepted(at=AT, round=2, plan=REPLAN),
    ]


def test_edges_come_from_after_references_for_each_sources_expansions_and_earlier_rounds() -> None:
    edges = run_edges(fold(two_rounds()))

    assert [(edge["source"], edge["target"], edge["kind"]) for edge in edges] == [
        ("case", "policy", "depends"),
        ("docs", "resolve", "for_each"),
        ("case", "resolve", "depends"),
        ("resolve", "resolve[0]", "expands"),
        ("resolve", "resolve[1]", "expands"),
        ("docs", "r2.check", "depends"),
    ]


def test_a_run_without_a_plan_has_no_edges() -> None:
    assert run_edges(fold(two_rounds()[:2])) == []


def test_an_event_is_one_sse_message_with_its_seq_as_id_and_its_kind_as_event() -> None:
    event = {"seq": 7, "kind": "node_succeeded", "node_id": "docs", "output": {"text": "two\nlines"}}

    message = sse_message(event)

    assert message.endswith("\n\n")
    lines = message[:-2].split("\n")
    assert lines[:2] == ["id: 7", "event: node_succeeded"]
    assert len(lines) == 3
    assert json.loads(lines[2].removeprefix("data: ")) == event


def test_the_page_loads_nothing_from_outside_and_its_policy_admits_only_its_own_script_and_style() -> None:
    page = ViewerPage.load()

    # The only absolute URL is the SVG namespace, an identifier that is never fetched.
    assert re.findall(r"https?://[^\s\"'`]+", page.html) == ["http://www.w3.org/2000/svg"]
    assert re.findall(r"\b(?:src|href)=\"([^\"]*)\"", page.html) == ["data:,"]
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "connect-src 'self'" in policy
    assert "form-action 'none'" in policy
    for tag, count in (("script", 2), ("style", 1)):  # the viewer's script and decide.js, inlined
        bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", page.html, flags=re.DOTALL)
        assert len(bodies) == count
        for body in bodies:
            digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in policy.split(f"{tag}-src ")[1].split(";")[0]
    assert "unsafe-inline" not in policy


def test_no_other_site_may_frame_the_page_that_decides() -> None:
    page = ViewerPage.load()

    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cross-Origin-Opener-Policy"] == "same-origin"


def test_the_page_never_turns_data_into_markup() -> None:
    scripts = re.findall(r"<script>(.*?)</script>", ViewerPage.load().html, flags=re.DOTALL)

    assert len(scripts) == 2
    for script in scripts:
        assert not re.search(
            r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function", script
        )

"""Deciding from the run viewer, in Debian's headless Chromium over the real API, supervisor, PostgreSQL and
caseops server: a person approves, rejects, reviews and answers with a key of their own, the page posts the
hash it showed, every refusal the API gives stays on the page, and another site's page decides nothing.
Effects are counted where they happen: caseops' outbox and the tool server's own call counts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from actors.launch.background_server import BackgroundServer
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, SELF_APPROVER_KEY, auth
from tests.integration.headless import Chromium
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import (
    SEND,
    act_on_a_copy,
    decide,
    finished,
    operations,
    operations_of,
    own_api,
    sent,
    wait_for,
    waiting,
    waiting_send,
)
from tests.integration.test_plan_review import REVIEWED, reviews, waiting_review
from tests.integration.test_questions import ASKING, pending
from tests.integration.test_viewer import save_screenshot, view_url

PLANNERS = ("tests.planners:AskingPlanner", "tests.planners:ReplanningWriter")
READS = ("", "/nodes", "/edges", "/operations", "/reviews", "/questions", "/tool-questions", "/stream*")
"""What the page reads of a run (a URL pattern each, after ``/runs/ID``); never a decision's route."""


# ---- the page, as a person uses it ----


def card(key: str) -> str:
    """The selector of the card of the pending item ``key`` (``approval:OPERATION:HASH``, ``review:ROUND:HASH``,
    ``question:N``)."""
    return f'[data-pending="{key}"]'


def open_at(browser: Chromium, url: str, item: str, *, timeout_s: float = 60.0) -> None:
    """Open the page at ``url``, and wait until it shows the card of ``item``."""
    browser.open(url)
    browser.wait_for(f"document.querySelector('{card(item)}') !== null", timeout_s=timeout_s)


def shown(browser: Chromium, selector: str) -> bool:
    return bool(browser.evaluate(f"document.querySelector({json.dumps(selector)}) !== null"))


def text_of(browser: Chromium, selector: str) -> str:
    found: str = browser.evaluate(f"document.querySelector({json.dumps(selector)}).innerText")
    return found


def decide_with(browser: Chromium, key: str) -> None:
    """Enter ``key`` under "Decide with", as a person pastes an approver's key."""
    browser.type_text("#decider-key", key)
    browser.click("#decider-form button[type=submit]")
    browser.wait_for("document.body.dataset.decider === 'entered'")


def press(browser: Chromium, item: str, verb: str, *, decisions: int) -> str:
    """Click ``verb`` on the card of ``item``; the API's answer as the page records it (``200``, or the status
    and the problem's slug), once the page has read the run again after it."""
    browser.click(f"{card(item)} button[data-verb={verb}]")
    browser.wait_for(
        f"document.body.dataset.decisions === '{decisions}' && document.body.dataset.deciding === 'false'"
    )
    answer: str = browser.evaluate("document.body.dataset.lastDecision")
    return answer


def logged(browser: Chromium) -> list[str]:
    """The answers listed under "Decided from this page", oldest first."""
    entries: list[str] = browser.evaluate(
        "[...document.querySelectorAll('#decision-log [data-decision-result]')].map((e) => e.dataset.decisionResult)"
    )
    return entries[::-1]


def approval(operation: dict[str, Any]) -> str:
    return f"approval:{operation['operation_id']}:{operation['args_hash']}"


@pytest.fixture
def own(ray_cluster: None, scratch_dsn: str, start_tool_server: Any, token_key: bytes, serve_api: Any) -> Any:  # noqa: F811
    """An API of the test's own, with the asking and the replanning-writer planners, over a caseops server of
    its own: its URL, the tool server, its supervisor."""
    return own_api(start_tool_server, scratch_dsn, token_key, serve_api, planners=PLANNERS)


# ---- operations ----


def test_a_person_approves_a_waiting_send_from_the_page_with_their_own_key_and_it_is_sent_once(
    api: str, client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    run_id, send = waiting_send(client, act_on_a_copy(dsn))
    item = approval(send)

    with Chromium(tmp_path / "chromium") as browser:
        # The requester's key: it reads the run, and may decide nothing.
        open_at(browser, view_url(api, run_id, DEMO_KEY), item)
        args = json.loads(text_of(browser, f"{card(item)} [data-args-for]"))
        hash_shown = text_of(browser, f"{card(item)} [data-hash]")
        save_screenshot(browser, "viewer-decide-waiting-send.png")
        decide_with(browser, APPROVER_KEY)
        browser.type_text(f"{card(item)} textarea[name=note]", "the certificate is due")
        answer = press(browser, item, "approve", decisions=1)
        browser.wait_for("document.body.dataset.runStatus === 'completed'")
        browser.wait_for("document.body.dataset.pending === '0'")
        save_screenshot(browser, "viewer-decide-approved.png")
        key_in_address_bar = browser.evaluate("location.href")

    assert (args, hash_shown) == (send["args"], send["args_hash"])  # what is sent, and what a yes quotes
    assert answer == "200"
    assert sent(dsn, send) == 1
    done = operations(client, run_id)[SEND]
    assert done["state"] == "succeeded"
    approved = next(step for step in done["history"] if step["to"] == "approved")
    assert (approved["actor"], approved["note"]) == ("person:tenant-demo/approver", "the certificate is due")
    assert APPROVER_KEY not in key_in_address_bar
    assert DEMO_KEY not in key_in_address_bar  # taken from the fragment, then removed


def test_the_page_shows_each_refusal_and_a_rejected_send_is_never_sent(
    api: str, client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    run_id, send = waiting_send(client, act_on_a_copy(dsn))
    item = approval(send)

    with Chromium(tmp_path / "chromium") as browser:
        open_at(browser, view_url(api, run_id, DEMO_KEY), item)
        without_scope = press(browser, item, "approve", decisions=1)  # the viewing key lacks runs:approve
        decide_with(browser, SELF_APPROVER_KEY)  # the run's own principal, with runs:approve
        own_run = press(browser, item, "approve", decisions=2)
        refusal_on_card = text_of(browser, f"{card(item)} .refusal")
        save_screenshot(browser, "viewer-decide-refusals.png")
        still_waiting = shown(browser, card(item))
        browser.click("#decider-reset")
        decide_with(browser, APPROVER_KEY)
        rejected = press(browser, item, "reject", decisions=3)
        browser.wait_for("document.body.dataset.runStatus === 'needs_human'")
        answers = logged(browser)

    assert without_scope == "403 scope-missing"
    assert own_run == "403 operation-self-approval"
    assert "operation-self-approval" in refusal_on_card
    assert "another person" in refusal_on_card
    assert still_waiting
    assert rejected == "200"
    assert answers == ["403 scope-missing", "403 operation-self-approval", "200"]  # none hidden
    run = client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY)).json()
    assert (run["status"], run["stop_reason"]) == ("needs_human", "OPERATION_REJECTED")
    assert operations(client, run_id)[SEND]["state"] == "rejected"
    assert sent(dsn, send) == 0


def test_after_a_replan_a_stale_page_is_refused_shows_the_refusal_and_then_the_new_write_to_decide(
    own: Any, dsn: str, tmp_path: Path
) -> None:
    """The page shows round 1's send; meanwhile another approver approved it and the run replanned a send of
    other arguments. The stale page's yes is refused and shown; it then shows the new send with its own hash."""
    base, tools, _ = own
    with httpx.Client(base_url=base, timeout=30) as client:
        created = client.post(
            "/runs",
            json={"case_id": "C-103", "stage": "act", "planner": "replanning-writer"},
            headers=auth(DEMO_KEY),
        )
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        wait_for(client, run_id, waiting)
        first = operations(client, run_id)[SEND]
        with Chromium(tmp_path / "chromium") as browser:
            open_at(browser, view_url(base, run_id, APPROVER_KEY), approval(first))
            # From here the page's reads are slow: it still shows round 1's send while the run moves on.
            run = f"{base}/runs/{run_id}"
            browser.hold_requests(*(run + read for read in READS))
            assert decide(client, run_id, first, "approve", APPROVER_KEY).status_code == 200
            second = awaiting_second_send(client, run_id, first)
            assert shown(browser, card(approval(first)))  # stale: what the page showed before the replan

            browser.click(f"{card(approval(first))} button[data-verb=approve]")
            browser.wait_for("document.body.dataset.decisions === '1'")
            refused = browser.evaluate("document.body.dataset.lastDecision")
            browser.release_requests()
            browser.wait_for(f"document.querySelector('{card(approval(second))}') !== null")
            browser.wait_for("document.body.dataset.deciding === 'false'")
            old_card_gone = not shown(browser, card(approval(first)))
            hash_shown = text_of(browser, f"{card(approval(second))} [data-hash]")
            save_screenshot(browser, "viewer-decide-stale-after-replan.png")
            approved_new = press(browser, approval(second), "approve", decisions=2)
            browser.wait_for("document.body.dataset.runStatus === 'completed'")
            answers = logged(browser)

    assert refused == "409 operation-already-decided"
    assert old_card_gone
    assert hash_shown == second["args_hash"] != first["args_hash"]
    assert approved_new == "200"
    assert answers == ["409 operation-already-decided", "200"]
    assert (sent(dsn, first), sent(dsn, second)) == (1, 1)
    assert tools.server.calls.get(SEND, 0) == 2


def awaiting_second_send(client: httpx.Client, run_id: str, first: dict[str, Any]) -> dict[str, Any]:
    """Round 2's new send, once the run waits for a person to approve it."""
    wait_for(client, run_id, lambda run: len(operations_of(client, run_id, SEND)) == 2 and waiting(run))
    second: dict[str, Any] = next(
        operation
        for operation in operations_of(client, run_id, SEND)
        if operation["operation_id"] != first["operation_id"]
    )
    assert second["state"] == "awaiting_approval"
    return second


def test_a_hash_that_is_not_the_writes_is_refused_and_the_page_shows_the_write_still_waiting(
    api: str, client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    """What reaches the API is not what the page showed (here rewritten on the way): the API refuses the yes,
    and the page says so and shows the write still waiting, with its own hash."""
    run_id, send = waiting_send(client, act_on_a_copy(dsn))
    item = approval(send)
    target = f"{api}/runs/{run_id}/operations/{send['operation_id']}/approve"

    with Chromium(tmp_path / "chromium") as browser:
        open_at(browser, view_url(api, run_id, APPROVER_KEY), item)
        browser.hold_requests(target)
        browser.click(f"{card(item)} button[data-verb=approve]")
        browser.wait_for("document.body.dataset.deciding === 'true'")
        [held] = browser.wait_for_held()
        quoted = json.loads(held["request"]["postData"])["args_hash"]
        browser.release_requests(rewrite={target: json.dumps({"args_hash": "0" * 64})})
        browser.wait_for(
            "document.body.dataset.decisions === '1' && document.body.dataset.deciding === 'false'"
        )
        answer = browser.evaluate("document.body.dataset.lastDecision")
        refusal_on_card = text_of(browser, f"{card(item)} .refusal")
        save_screenshot(browser, "viewer-decide-hash-mismatch.png")

    assert quoted == send["args_hash"]  # the page posts exactly the hash it showed
    assert answer == "409 operation-hash-mismatch"
    assert "not the one of the arguments waiting" in refusal_on_card
    assert operations(client, run_id)[SEND]["state"] == "awaiting_approval"
    assert sent(dsn, send) == 0
    client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))


def test_an_unknown_outcome_is_resolved_from_the_page_with_the_note_it_requires(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    from tests.integration.test_operation_faults import toolsets_with_a_short_send

    def unreconciled(url: str) -> Any:
        return toolsets_with_a_short_send(url, reconcile=False)

    base, tools, _ = own_api(start_tool_server, scratch_dsn, token_key, serve_api, unreconciled)
    with httpx.Client(base_url=base, timeout=30) as client:
        run_id, send = waiting_send(client)
        tools.server.simulate(stall_after_commit={SEND: 1})  # the send lands; its answer never comes
        assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        item = f"resolution:{send['operation_id']}:{send['args_hash']}"
        with Chromium(tmp_path / "chromium") as browser:
            open_at(browser, view_url(base, run_id, APPROVER_KEY), item, timeout_s=90)
            browser.click(f"{card(item)} button[data-verb=resolve]")  # no note yet: the page does not post
            unposted = browser.evaluate("document.body.dataset.decisions")
            browser.type_text(f"{card(item)} textarea[name=note]", "seen in the mailer's log")
            save_screenshot(browser, "viewer-decide-resolve.png")
            answer = press(browser, item, "resolve", decisions=1)
            browser.wait_for("document.body.dataset.pending === '0'")
        run = wait_for(client, run_id, finished)
        resolved = operations(client, run_id)[SEND]

    assert unposted == "0"
    assert answer == "200"
    assert resolved["state"] == "succeeded"
    assert (resolved["history"][-1]["actor"], resolved["history"][-1]["note"]) == (
        "person:tenant-demo/approver",
        "seen in the mailer's log",
    )
    assert sent(dsn, send) == 1
    assert tools.server.calls.get(SEND, 0) == 1  # resolved, never sent again
    assert run["finished_at"] is not None


# ---- plans and questions ----


def test_a_plan_review_is_approved_from_the_page_and_the_run_completes(
    api: str, client: httpx.Client, tmp_path: Path
) -> None:
    run_id, review = waiting_review(client, REVIEWED)
    item = f"review:1:{review['plan_hash']}"

    with Chromium(tmp_path / "chromium") as browser:
        # An approver's own key: it reads the run, and decides.
        open_at(browser, view_url(api, run_id, APPROVER_KEY), item)
        hash_shown = text_of(browser, f"{card(item)} [data-hash]")
        needing_yes = browser.evaluate(
            f"[...document.querySelectorAll('{card(item)} tr.needs-yes td:first-child')].map((td) => td.innerText)"
        )
        save_screenshot(browser, "viewer-decide-plan-review.png")
        browser.type_text(f"{card(item)} textarea[name=note]", "reads only")
        answer = press(browser, item, "approve", decisions=1)
        browser.wait_for("document.body.dataset.runStatus === 'completed'")

    assert hash_shown == review["plan_hash"]
    assert needing_yes == review["nodes"]
    assert answer == "200"
    [decided] = reviews(client, run_id)
    assert (decided["state"], decided["decided_by"], decided["note"]) == (
        "approved",
        "person:tenant-demo/approver",
        "reads only",
    )


def test_a_planners_question_is_answered_from_the_page(own: Any, tmp_path: Path) -> None:
    base, tools, _ = own
    with httpx.Client(base_url=base, timeout=30) as client:
        created = client.post("/runs", json=ASKING, headers=auth(DEMO_KEY))
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        wait_for(client, run_id, waiting)
        pending(client, run_id, 1)
        with Chromium(tmp_path / "chromium") as browser:
            open_at(browser, view_url(base, run_id, DEMO_KEY), "question:1")
            decide_with(browser, APPROVER_KEY)
            browser.type_text(f"{card('question:1')} textarea[name=answer]", "read C-102 please")
            save_screenshot(browser, "viewer-decide-question.png")
            answer = press(browser, "question:1", "answer", decisions=1)
            browser.wait_for("document.body.dataset.runStatus === 'completed'")
        run = wait_for(client, run_id, finished)

    assert answer == "200"
    assert run["result"] == {"read": ["case"], "told": ["person:tenant-demo/approver: read C-102 please"]}
    assert tools.server.calls == {"caseops_get_case_snapshot": 1}


# ---- another site ----

ATTACKER_PAGE = """<!doctype html><html><body>
<form id="form" method="POST" enctype="text/plain" action="{target}">
  <input name='{{"args_hash":"{args_hash}","x":"' value='"}}'>
</form>
<script>
(async () => {{
  const body = JSON.stringify({{ args_hash: "{args_hash}" }});
  const tried = {{}};
  // A "simple" request needs no permission: it is sent, with every credential the browser holds for the API.
  await fetch("{target}", {{ method: "POST", mode: "no-cors", credentials: "include", body,
    headers: {{ "Content-Type": "text/plain", Authorization: "Bearer {key}" }} }});
  tried.simple = "sent";
  // With a key header it needs the API's permission (CORS), which the API never gives.
  try {{
    await fetch("{target}", {{ method: "POST", credentials: "include", body,
      headers: {{ "Content-Type": "application/json", Authorization: "Bearer {key}" }} }});
    tried.with_key = "answered";
  }} catch (error) {{
    tried.with_key = "blocked";
  }}
  document.body.dataset.tried = JSON.stringify(tried);
}})();
</script></body></html>"""


@pytest.fixture
def other_site() -> Iterator[Any]:
    """A site of another origin (another loopback port) serving one page: ``other_site(html)`` → its URL."""
    served: dict[str, str] = {}

    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse(served["html"])

    server = BackgroundServer().start(Starlette(routes=[Route("/", page)]))

    def serve(html: str) -> str:
        served["html"] = html
        return server.url + "/"

    yield serve
    server.stop()


def test_another_sites_page_decides_nothing_even_in_a_browser_that_holds_an_approvers_key(
    api: str, client: httpx.Client, dsn: str, other_site: Any, tmp_path: Path
) -> None:
    run_id, send = waiting_send(client, act_on_a_copy(dsn))
    target = f"{api}/runs/{run_id}/operations/{send['operation_id']}/approve"
    attacker = other_site(ATTACKER_PAGE.format(target=target, args_hash=send["args_hash"], key=APPROVER_KEY))

    with Chromium(tmp_path / "chromium") as browser:
        # This tab now holds an approver's key for the API's origin.
        open_at(browser, view_url(api, run_id, APPROVER_KEY), approval(send))
        browser.record_responses()
        browser.open(attacker)
        browser.wait_for("document.body && document.body.dataset.tried !== undefined")
        tried = json.loads(browser.evaluate("document.body.dataset.tried"))
        browser.evaluate(
            "document.getElementById('form').submit()"
        )  # a cross-site form post, in the top window
        browser.wait_for(f"location.href === {json.dumps(target)} && document.body !== null")
        form_answer = json.loads(browser.evaluate("document.body.innerText"))
        answers = [(method, status) for method, url, status in browser.responses() if url == target]

    assert tried == {"simple": "sent", "with_key": "blocked"}
    # The two that left reached the API without a key, and were refused before anything else was looked at.
    assert answers.count(("POST", 401)) == 2, answers
    assert ("POST", 200) not in answers
    assert form_answer["type"].endswith("/unauthorized")
    assert operations(client, run_id)[SEND]["state"] == "awaiting_approval"
    assert [step["to"] for step in operations(client, run_id)[SEND]["history"]][-1] == "awaiting_approval"
    assert sent(dsn, send) == 0
    client.post(f"/runs/{run_id}/cancel", headers=auth(DEMO_KEY))

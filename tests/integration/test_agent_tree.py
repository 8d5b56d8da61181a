"""The tree of agent runs as a person sees it, over the real API, supervisor, PostgreSQL and caseops server: the
viewer opens an agent node into its child run's page and back (Debian's headless Chromium), ``raydag watch``
follows a parent's child runs nested under their nodes, and a grandchild's write waits in the inbox naming
the run it serves. The send is counted in caseops' outbox."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, auth, raydag_cli
from tests.integration.headless import Chromium
from tests.integration.test_cli_inbox import watching
from tests.integration.test_operations import SEND, act_on_a_copy, decide, draft_then_send, operations, sent
from tests.integration.test_viewer import DomElements, save_screenshot, view_url

CASE = "caseops_get_case_snapshot"


def agent(node_id: str, goal: str, *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"id": node_id, "agent": {"goal": goal, "plan": {"nodes": list(nodes)}}}


def run_of(client: httpx.Client, run_id: str) -> dict[str, Any]:
    answer = client.get(f"/runs/{run_id}", headers=auth(DEMO_KEY))
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def only_child(client: httpx.Client, run_id: str, within_s: float = 60) -> str:
    """The one child run of ``run_id``, once it exists."""
    deadline = time.monotonic() + within_s  # a bound against hanging, not a timing claim
    while not (children := run_of(client, run_id)["children"]):
        assert time.monotonic() < deadline, run_of(client, run_id)
        time.sleep(0.1)
    (child,) = children
    return str(child)


def test_the_viewer_opens_an_agent_node_into_its_child_run_and_the_child_links_back(
    api: str, client: httpx.Client, tmp_path: Path
) -> None:
    plan = {
        "nodes": [
            agent("research", "read the case", {"id": "case", "tool": CASE, "args": {"case_id": "C-102"}})
        ]
    }
    created = client.post(
        "/runs",
        params={"wait": 60},
        json={"resource": {"case_id": "C-102"}, "plan": plan},
        headers=auth(DEMO_KEY),
    )
    assert created.status_code == 201, created.text
    parent = created.json()
    assert parent["status"] == "completed", parent
    (child,) = parent["children"]

    with Chromium(tmp_path / "chromium") as browser:
        browser.open(view_url(api, parent["run_id"]))
        browser.wait_for("document.body.dataset.stream === 'closed'")
        dom = DomElements(browser.dom())
        (opens,) = [attrs for tag, attrs in dom.elements if tag == "a" and "data-opens" in attrs]
        (node,) = dom.with_attribute("data-child-run")
        (children,) = dom.with_attribute("data-children")
        save_screenshot(browser, "viewer-agent-parent.png")

        browser.click('[data-node-id="research"] rect')  # a person's click on the node's box
        browser.wait_for(f"location.pathname.endsWith('/runs/{child}/view')")
        browser.wait_for("document.body.dataset.stream === 'closed'")
        child_dom = DomElements(browser.dom())
        (back,) = child_dom.with_attribute("data-parent")
        child_nodes = {
            attrs["data-node-id"]: attrs["data-status"] for attrs in child_dom.with_attribute("data-node-id")
        }
        parent_links = [
            attrs["href"]
            for tag, attrs in child_dom.elements
            if tag == "a" and parent["run_id"] in attrs.get("href", "")
        ]
        save_screenshot(browser, "viewer-agent-child.png")

    assert (opens["data-opens"], opens["href"]) == (child, f"../{child}/view")
    assert (node["data-node-id"], node["data-child-run"], node["data-status"]) == (
        "research",
        child,
        "succeeded",
    )
    assert children["data-children"] == child
    assert (back["data-parent"], back["data-parent-node"]) == (parent["run_id"], "research")
    assert parent_links == [f"../{parent['run_id']}/view"]
    assert child_nodes == {"case": "succeeded"}


def test_a_grandchilds_write_waits_in_the_inbox_of_each_run_above_it_naming_its_parent_and_root_and_watch_nests_it(
    api: str, client: httpx.Client, dsn: str, tmp_path: Path
) -> None:
    act = act_on_a_copy(dsn)
    case = act["case_id"]
    inner = agent("inner", "request the documents", *draft_then_send(case))
    plan = {"nodes": [agent("outer", "delegate the request", inner)]}
    created = client.post("/runs", json={**act, "plan": plan}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    root = created.json()["run_id"]
    watch = watching(root, api, DEMO_KEY)
    try:
        middle = only_child(client, root)
        leaf = only_child(client, middle)
        deadline = time.monotonic() + 60  # a bound against hanging, not a timing claim
        while not (
            waiting := client.get("/decisions", params={"run_id": leaf}, headers=auth(DEMO_KEY)).json()[
                "items"
            ]
        ):
            assert time.monotonic() < deadline, run_of(client, leaf)
            time.sleep(0.1)
        (item,) = waiting
        # What a sub-agent waits for, each run above it waits for too: its parent's and its root's inbox list it.
        above = {
            run: client.get("/decisions", params={"run_id": run}, headers=auth(DEMO_KEY)).json()["items"]
            for run in (middle, root)
        }
        while (root_view := run_of(client, root))["status"] != "waiting":  # parked on its child, in turn
            assert time.monotonic() < deadline, root_view
            time.sleep(0.1)
        with Chromium(tmp_path / "chromium") as browser:  # the root's page links to where the decision waits
            browser.open(view_url(api, root))
            browser.wait_for("document.body.dataset.childPending === '1'")
            (child_waits,) = DomElements(browser.dom()).with_attribute("data-child-waits")
            child_wait_links = [
                attrs["href"]
                for tag, attrs in DomElements(browser.dom()).elements
                if tag == "a" and leaf in attrs.get("href", "")
            ]
            save_screenshot(browser, "viewer-agent-child-waits.png")
        inbox = raydag_cli("inbox", "--run", root, url=api, key=APPROVER_KEY)
        listed = raydag_cli("runs", "--case-id", case, url=api, key=DEMO_KEY)
        send = operations(client, leaf)[SEND]
        assert decide(client, leaf, send, "approve", APPROVER_KEY).status_code == 200
        out, err = watch.communicate(timeout=120)
    finally:
        watch.kill()
        watch.communicate()

    assert (item["kind"], item["run_id"], item["tool"]) == ("operation", leaf, SEND)
    assert item["parent"] == {"run_id": middle, "node_id": "inner"}
    assert item["root_run_id"] == root
    assert above == {middle: [item], root: [item]}
    assert root_view["waiting_for"] == [item]  # the root's own view names what its grandchild waits for
    assert (child_waits["data-child-waits"], child_waits["data-kind"]) == (leaf, "operation")
    assert child_wait_links == [f"../{leaf}/view"]
    assert inbox.returncode == 0, inbox.stderr
    assert f"serves    run {middle}, its agent node inner, under run {root}" in inbox.stdout, inbox.stdout
    assert listed.returncode == 0, listed.stderr
    assert f"{middle} is a child run of {root} (node outer)" in listed.stdout, listed.stdout
    assert f"{leaf} is a child run of {middle} (node inner)" in listed.stdout, listed.stdout
    assert sent(dsn, send) == 1

    assert watch.returncode == 0, (out, err)
    lines = out.splitlines()
    # The watched run's own lines, then each child run's nested under its agent node, deeper for a grandchild.
    assert any(line.endswith(f"outer  agent: child run {middle} (followed below)") for line in lines), lines
    assert any(f"    [outer] inner  agent: child run {leaf} (followed below)" in line for line in lines), (
        lines
    )
    assert any(f"        [outer/inner] send  {SEND} started" in line for line in lines), lines
    assert any(
        f"        [outer/inner] waits for operation {send['operation_id']}" in line for line in lines
    ), lines
    assert any(line.endswith("        [outer/inner] run completed") for line in lines), lines
    assert any(line.endswith("  run completed") and "[" not in line for line in lines), lines

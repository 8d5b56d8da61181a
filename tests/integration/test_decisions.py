"""What waits for people, over the real API, supervisor, PostgreSQL and caseops server: ``GET /decisions`` lists
the three kinds of decision alike across the tenant's runs (a write awaiting approval, a plan awaiting review,
a planner's question), each with what a person needs and the route that decides it; a waiting run's view
names the same items; and each is decided through its own route, refused the same way when it may not be."""

from __future__ import annotations

from typing import Any

import httpx

from actors.launch.settings import DEV_API_KEYS
from tests.integration.conftest import (
    APPROVER_KEY,
    DEMO_KEY,
    NO_DOCUMENTS_KEY,
    OTHER_APPROVER_KEY,
    SELF_APPROVER_KEY,
    auth,
)
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import SEND, finished, problem, wait_for, waiting_send
from tests.integration.test_plan_review import reviews
from tests.integration.test_questions import api, asking_run, pending  # noqa: F401 - api: a fixture

REQUESTER = f"tenant-demo/{DEV_API_KEYS[DEMO_KEY].subject}"


def inbox(client: httpx.Client, key: str = APPROVER_KEY, **query: Any) -> dict[str, Any]:
    answer = client.get("/decisions", params=query, headers=auth(key))
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def quoting(item: dict[str, Any]) -> dict[str, Any]:
    """A body that decides ``item`` as it was shown."""
    match item["kind"]:
        case "operation":
            return {"args_hash": item["args_hash"]}
        case "review":
            return {"plan_hash": item["plan_hash"]}
        case _:
            return {"answer": "C-102"}


def kinds(page: dict[str, Any]) -> list[str]:
    return [item["kind"] for item in page["items"]]


def test_one_inbox_lists_the_three_kinds_alike_and_each_item_is_decided_by_its_route(api: Any) -> None:  # noqa: F811
    base, _, _ = api
    with httpx.Client(base_url=base, timeout=60) as client:
        write_run, send = waiting_send(client)
        # ?wait= answers once the run waits for a person, with what it waits for.
        created = client.post(
            "/runs", params={"wait": 30}, json={"case_id": "C-102", "review": "plan"}, headers=auth(DEMO_KEY)
        )
        assert created.status_code == 201, created.text
        review_run = created.json()
        [review] = reviews(client, review_run["run_id"])
        question_run = asking_run(client)
        asked = pending(client, question_run, 1)

        page = inbox(client)
        items = page["items"]
        by_kind = {item["kind"]: item for item in items}
        own = inbox(client, DEMO_KEY)["items"]
        barred = inbox(client, SELF_APPROVER_KEY)["items"]
        views = {
            item["run_id"]: client.get(f"/runs/{item['run_id']}", headers=auth(DEMO_KEY)).json()
            for item in items
        }
        filtered = {
            "review": kinds(inbox(client, kind="review")),
            "operation+question": kinds(inbox(client, kind=["operation", "question"])),
            "the question's run": kinds(inbox(client, run_id=question_run)),
            "C-103": kinds(inbox(client, case_id="C-103")),
            "resource C-102": sorted(kinds(inbox(client, resource="case_id:C-102"))),
        }
        first = inbox(client, limit=1)
        rest = inbox(client, limit=2, cursor=first["next"])
        foreign = inbox(client, OTHER_APPROVER_KEY)["items"]
        unreadable = inbox(client, NO_DOCUMENTS_KEY)["items"]
        refused = [
            problem(client.post(path, json=quoting(item), headers=auth(DEMO_KEY)))
            for item in items
            for path in item["decide"].values()
        ]

        decided = [
            client.post(
                by_kind[kind]["decide"][verb], json=quoting(by_kind[kind]), headers=auth(APPROVER_KEY)
            ).status_code
            for kind, verb in (("operation", "approve"), ("review", "approve"), ("question", "answer"))
        ]
        after = inbox(client)
        ended = [wait_for(client, run, finished) for run in (write_run, review_run["run_id"], question_run)]

    assert (review_run["status"], review_run["waiting_for"]) == (
        "waiting",
        [{**by_kind["review"], "decidable": False}],
    )
    assert sorted(by_kind) == ["operation", "question", "review"]
    assert len(items) == 3
    assert [item["expires_at"] for item in items] == sorted(item["expires_at"] for item in items)
    assert page["next"] is None
    common = {"requested_by": REQUESTER, "decidable": True}
    assert by_kind["operation"] == {
        **by_kind["operation"],
        **common,
        "run_id": write_run,
        "resource": {"case_id": "C-103"},
        "state": "awaiting_approval",
        "operation_id": send["operation_id"],
        "node_id": send["node_id"],
        "tool": SEND,
        "risk": "irreversible_write",
        "args": send["args"],
        "args_hash": send["args_hash"],
        "expires_at": send["expires_at"],
        "decide": {
            verb: f"/runs/{write_run}/operations/{send['operation_id']}/{verb}"
            for verb in ("approve", "reject")
        },
    }
    assert by_kind["review"] == {
        **by_kind["review"],
        **common,
        "run_id": review_run["run_id"],
        "resource": {"case_id": "C-102"},
        "round": 1,
        "plan": review["plan"],
        "plan_hash": review["plan_hash"],
        "nodes": review["nodes"],
        "expires_at": review["expires_at"],
        "decide": {verb: f"/runs/{review_run['run_id']}/reviews/1/{verb}" for verb in ("approve", "reject")},
    }
    assert by_kind["question"] == {
        **by_kind["question"],
        **common,
        "run_id": question_run,
        "number": 1,
        "round": asked["round"],
        "question": asked["question"],
        "expires_at": asked["expires_at"],
        "decide": {"answer": f"/runs/{question_run}/questions/1/answer"},
    }
    # A waiting run names what it waits for: the inbox's own items.
    assert {run_id: (run["status"], run["waiting_for"]) for run_id, run in views.items()} == {
        item["run_id"]: ("waiting", [{**item, "decidable": False}]) for item in items
    }
    # The requester reads what its runs wait for and may decide none of it; the run's own principal holding
    # the scopes is barred by its tenant's policy (by default) from its writes and plans, and has no scope to
    # answer; another tenant, and a key lacking the runs' scopes, see nothing.
    assert [(item["kind"], item["decidable"]) for item in own] == [(item["kind"], False) for item in items]
    assert [(item["kind"], item["decidable"]) for item in barred] == [(item["kind"], False) for item in items]
    assert (foreign, unreadable) == ([], [])
    assert filtered == {
        "review": ["review"],
        "operation+question": [kind for kind in kinds(page) if kind != "review"],
        "the question's run": ["question"],
        "C-103": ["operation"],
        "resource C-102": ["question", "review"],
    }
    assert (len(first["items"]), rest["next"]) == (1, None)
    assert first["items"] + rest["items"] == items
    # One admission for every kind: the scope first, in the kind's words.
    assert refused == [(403, "scope-missing")] * 5  # approve and reject twice, answer once
    assert decided == [200, 200, 200]
    assert after == {"items": [], "next": None}
    assert [run["status"] for run in ended] == ["completed"] * 3

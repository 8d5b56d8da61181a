"""The run API through Ray Serve over real HTTP: runs, replays, conflicts, tenant isolation, auth, errors."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from actors.store.runs import RunStore
from tests.c102 import C102_RESULT
from tests.integration.conftest import DEMO_KEY, NO_DOCUMENTS_KEY, OTHER_KEY, RunningToolServer, auth


def start_run(
    client: httpx.Client, body: dict[str, Any], *, key: str = DEMO_KEY, **headers: str
) -> httpx.Response:
    return client.post("/runs", params={"wait": 60}, json=body, headers={**auth(key), **headers})


async def start_run_async(
    api: str, body: dict[str, Any], *, key: str = DEMO_KEY, **headers: str
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=api, timeout=90) as http:
        return await http.post("/runs", params={"wait": 60}, json=body, headers={**auth(key), **headers})


async def get_async(api: str, path: str, key: str = DEMO_KEY) -> Any:
    async with httpx.AsyncClient(base_url=api, timeout=30) as http:
        response = await http.get(path, headers=auth(key))
        response.raise_for_status()
        return response.json()


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert body["type"].endswith("/" + slug)
    return body


def test_c102_completes_with_the_normalized_documents_result(client: httpx.Client) -> None:
    response = start_run(client, {"case_id": "C-102"})

    assert response.status_code == 201, response.text
    run = response.json()
    assert response.headers["location"] == f"/runs/{run['run_id']}"
    assert run["status"] == "completed"
    assert run["stop_reason"] is None
    assert run["result"] == C102_RESULT
    assert [node["id"] for node in run["plan"]["nodes"]] == ["case", "policy", "docs", "resolve"]
    assert client.get(f"/runs/{run['run_id']}", headers=auth(DEMO_KEY)).json() == run


def test_nodes_show_each_call_with_args_fingerprint_and_timing(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-102"}).json()

    nodes = client.get(f"/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY)).json()

    by_id = {node["node_id"]: node for node in nodes}
    assert list(by_id) == ["case", "policy", "docs", "resolve", "resolve[0]"]
    child = by_id["resolve[0]"]
    assert child["args"] == {"case_id": "C-102", "document_id": "DOC-C102-003"}
    assert child["status"] == "succeeded"
    assert child["attempts"] == 1
    assert len(child["fingerprint"]) == 64
    assert child["started_at"] <= child["finished_at"]
    assert child["decision"] == {
        "allowed": True,
        "rule_id": "allow.read_only_in_scope",
        "reason": "read-only tool, scope held",
    }
    assert by_id["resolve"]["children"] == ["resolve[0]"]
    assert by_id["resolve"]["status"] == "succeeded"


def test_events_are_the_ordered_transitions_of_the_run(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-102"}).json()

    events = client.get(f"/runs/{run['run_id']}/events", headers=auth(DEMO_KEY)).json()

    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    kinds = [event["kind"] for event in events]
    assert kinds[:3] == ["run_created", "planning_started", "plan_accepted"]
    assert kinds[-2:] == ["join_started", "run_finished"]
    assert kinds.count("node_dispatched") == kinds.count("node_succeeded") == 4
    dispatched = [event["node_id"] for event in events if event["kind"] == "node_dispatched"]
    assert dispatched[:3] == ["case", "policy", "docs"]
    assert events[-1]["status"] == "completed"

    resumed = client.get(f"/runs/{run['run_id']}/events?after=3", headers=auth(DEMO_KEY)).json()
    assert resumed == events[3:]
    bad = client.get(f"/runs/{run['run_id']}/events?after=-1", headers=auth(DEMO_KEY))
    assert bad.status_code == 422
    assert bad.headers["content-type"] == "application/problem+json"


async def test_replay_with_the_same_key_returns_the_same_run_without_running_tools_again(
    api: str, store: RunStore, tool_server: RunningToolServer
) -> None:
    key = f"replay-{uuid.uuid4()}"
    first = await start_run_async(api, {"case_id": "C-102"}, **{"Idempotency-Key": key})
    calls_after_first = sum(tool_server.server.calls.values())

    replay = await start_run_async(api, {"case_id": "C-102"}, **{"Idempotency-Key": key})

    assert first.status_code == 201
    assert replay.status_code == 200
    assert replay.json()["run_id"] == first.json()["run_id"]
    assert replay.json()["result"] == C102_RESULT
    assert sum(tool_server.server.calls.values()) == calls_after_first
    ledger = await store.ledger(first.json()["run_id"])
    assert sorted(row["node_id"] for row in ledger) == ["case", "docs", "policy", "resolve[0]"]


def test_same_key_with_a_different_body_is_a_409(client: httpx.Client) -> None:
    key = f"conflict-{uuid.uuid4()}"
    first = start_run(client, {"case_id": "C-102"}, **{"Idempotency-Key": key})

    conflict = start_run(client, {"case_id": "C-101"}, **{"Idempotency-Key": key})

    body = assert_problem(conflict, 409, "idempotency-key-reused")
    assert body["run_id"] == first.json()["run_id"]


def test_another_tenants_case_is_a_404_identical_to_an_unknown_case(client: httpx.Client) -> None:
    foreign = start_run(client, {"case_id": "C-201"}, key=DEMO_KEY)  # C-201 belongs to tenant-other
    unknown = start_run(client, {"case_id": "C-999"}, key=DEMO_KEY)

    assert_problem(foreign, 404, "case-not-found")
    assert foreign.content == unknown.content


def test_another_tenants_run_is_a_404_identical_to_an_unknown_run(client: httpx.Client) -> None:
    run_id = start_run(client, {"case_id": "C-102"}).json()["run_id"]

    foreign = client.get(f"/runs/{run_id}", headers=auth(OTHER_KEY))
    unknown = client.get(f"/runs/{uuid.uuid4()}", headers=auth(OTHER_KEY))

    assert_problem(foreign, 404, "run-not-found")
    assert foreign.json() | {"instance": None} == unknown.json() | {"instance": None}
    assert client.get(f"/runs/{run_id}/nodes", headers=auth(OTHER_KEY)).status_code == 404
    assert client.get(f"/runs/{run_id}/events", headers=auth(OTHER_KEY)).status_code == 404


def test_the_other_tenant_runs_its_own_case(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-201"}, key=OTHER_KEY).json()

    assert run["status"] == "completed"
    assert run["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert run["result"]["resolved_document_codes"] == ["PROPERTY_PHOTOS"]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Basic {DEMO_KEY}"},
        {"Authorization": "Bearer"},
    ],
    ids=["missing", "unknown-key", "wrong-scheme", "empty"],
)
def test_requests_without_a_valid_api_key_are_401(client: httpx.Client, headers: dict[str, str]) -> None:
    for response in (
        client.post("/runs", json={"case_id": "C-102"}, headers=headers),
        client.get(f"/runs/{uuid.uuid4()}", headers=headers),
    ):
        assert_problem(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == 'Bearer realm="raydag"'


@pytest.mark.parametrize(
    ("body", "location"),
    [
        ({"case_id": "C-102", "tenant_id": "tenant-other"}, "/body/tenant_id"),
        ({"case_id": "C 102; DROP"}, "/body/case_id"),
        ({"case_id": "C-102", "plan": "not an object"}, "/body/plan"),
    ],
    ids=["tenant-in-body", "bad-case-id", "plan-not-object"],
)
def test_malformed_bodies_are_422_problems_naming_the_field(
    client: httpx.Client, body: dict[str, Any], location: str
) -> None:
    response = client.post("/runs", json=body, headers=auth(DEMO_KEY))

    problem = assert_problem(response, 422, "invalid-request")
    assert location in [error["location"] for error in problem["errors"]]


def test_a_run_naming_no_resource_is_a_422_naming_the_key_its_planners_tools_bind(
    client: httpx.Client,
) -> None:
    """No resource is not malformed (a plan whose tools bind nothing needs none), but caseops' planner cannot
    check a case without a case_id: the refusal says which key the run lacks."""
    for body in ({}, {"resource": {}}, {"goal": "no resource at all"}):
        response = client.post("/runs", json=body, headers=auth(DEMO_KEY))

        problem = assert_problem(response, 422, "planner-lacks-tools")
        assert problem["resource_lacks"] == ["case_id"]
        assert problem["detail"].endswith("they bind 'case_id', which the run's resource lacks")


def test_wait_outside_its_range_is_a_422(client: httpx.Client) -> None:
    response = client.post("/runs", params={"wait": 61}, json={"case_id": "C-102"}, headers=auth(DEMO_KEY))

    assert_problem(response, 422, "invalid-request")


def test_an_invalid_client_plan_is_a_422_with_the_plan_error(client: httpx.Client) -> None:
    plan = {"nodes": [{"id": "a", "tool": "caseops_get_case_snapshot", "args": {"case_id": {"$ref": "b"}}}]}

    response = start_run(client, {"case_id": "C-102", "plan": plan})

    problem = assert_problem(response, 422, "plan-invalid")
    assert problem["plan_error"]["code"] == "UNKNOWN_REFERENCE"
    assert problem["plan_error"]["location"] == "/nodes/0/args/case_id"


async def test_a_client_plan_aimed_at_another_case_is_denied_and_never_executed(
    api: str, store: RunStore, tool_server: RunningToolServer
) -> None:
    plan = {
        "nodes": [
            {"id": "mine", "tool": "caseops_get_policy_requirements", "args": {"case_id": "C-102"}},
            {"id": "theirs", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-101"}},
        ]
    }
    snapshot_calls = tool_server.server.calls.get("caseops_get_case_snapshot", 0)

    run = (await start_run_async(api, {"case_id": "C-102", "plan": plan, "planner": "conformance"})).json()

    nodes = {node["node_id"]: node for node in await get_async(api, f"/runs/{run['run_id']}/nodes")}
    assert nodes["theirs"]["status"] == "denied"
    assert nodes["theirs"]["decision"]["rule_id"] == "resource.case_bound"
    assert nodes["mine"]["status"] == "succeeded"
    assert tool_server.server.calls.get("caseops_get_case_snapshot", 0) == snapshot_calls
    ledger = {row["node_id"]: row for row in await store.ledger(run["run_id"])}
    assert ledger["theirs"]["status"] == "denied"
    assert ledger["theirs"]["started_at"] is None
    assert run["status"] == "needs_human"
    assert run["stop_reason"] == "INSUFFICIENT_EVIDENCE"


def test_an_identical_action_in_one_run_executes_once(client: httpx.Client) -> None:
    plan = {
        "nodes": [
            {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}},
            {"id": "again", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}},
            {"id": "policy", "tool": "caseops_get_policy_requirements", "args": {"case_id": "C-102"}},
            {"id": "docs", "tool": "caseops_list_unclassified_documents", "args": {"case_id": "C-102"}},
        ]
    }

    run = start_run(client, {"case_id": "C-102", "plan": plan}).json()

    nodes = {
        node["node_id"]: node
        for node in client.get(f"/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY)).json()
    }
    assert nodes["again"]["status"] == "reused"
    assert nodes["again"]["reused_from"] == "case"
    assert nodes["again"]["fingerprint"] == nodes["case"]["fingerprint"]
    assert nodes["again"]["attempts"] == 0


def test_a_principal_without_the_documents_scope_cannot_list_documents(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-102"}, key=NO_DOCUMENTS_KEY).json()

    nodes = {
        node["node_id"]: node
        for node in client.get(f"/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY)).json()
    }
    assert nodes["docs"]["status"] == "denied"
    assert nodes["docs"]["decision"]["rule_id"] == "scope.missing"
    assert nodes["resolve"]["status"] == "skipped"
    assert run["status"] == "needs_human"
    assert run["stop_reason"] == "INSUFFICIENT_EVIDENCE"


@pytest.mark.parametrize(
    ("case_id", "status", "outcome", "stop_reason"),
    [
        ("C-101", "completed", "DOCUMENTS_COMPLETE", None),
        ("C-103", "completed", "MISSING_REQUIRED_DOCUMENTS", None),
        ("C-104", "completed", "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION", None),
        ("C-105", "needs_human", "MISSING_REQUIRED_DOCUMENTS", "UNRESOLVED_SOURCE_DOCUMENTS"),
    ],
)
def test_each_fixture_case_reaches_its_outcome(
    client: httpx.Client, case_id: str, status: str, outcome: str, stop_reason: str | None
) -> None:
    run = start_run(client, {"case_id": case_id}).json()

    assert run["status"] == status
    assert run["stop_reason"] == stop_reason
    assert run["result"]["outcome"] == outcome


def test_the_wide_case_fans_out_and_the_newest_rule_version_wins(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-104"}).json()

    nodes = client.get(f"/runs/{run['run_id']}/nodes", headers=auth(DEMO_KEY)).json()
    children = [node for node in nodes if node["for_each_parent"] == "resolve"]
    assert len(children) == 24
    assert all(node["status"] in ("succeeded", "reused") for node in children)
    assert run["result"]["resolved_document_codes"] == [
        "ACCIDENT_CERTIFICATE",
        "IDENTITY_DOCUMENT",
        "MEDICAL_CERTIFICATE",
        "REPAIR_ESTIMATE",
    ]
    assert "ACCIDENT_REPORT" not in run["result"]["resolved_document_codes"]  # 2026.9 lost to 2026.10
    assert run["result"]["missing_document_codes"] == []


def test_lowered_budgets_stop_a_fan_out_with_a_specific_reason(client: httpx.Client) -> None:
    run = start_run(client, {"case_id": "C-104", "budgets": {"max_nodes": 64, "max_fanout": 8}}).json()

    assert run["status"] == "stopped"
    assert run["stop_reason"] == "FANOUT_LIMIT"


def test_a_budget_above_the_server_limit_is_refused_naming_the_limit(client: httpx.Client) -> None:
    response = start_run(client, {"case_id": "C-102", "budgets": {"max_nodes": 100_000, "max_fanout": 4}})

    problem = assert_problem(response, 422, "budget-above-limit")
    assert problem["above"] == {"max_nodes": {"requested": 100_000, "limit": 64}}


def test_a_budget_that_is_not_a_budget_is_a_422(client: httpx.Client) -> None:
    response = start_run(client, {"case_id": "C-102", "budgets": {"max_tokens_per_day": 5}})

    problem = assert_problem(response, 422, "invalid-request")
    assert "/body/budgets/max_tokens_per_day" in [error["location"] for error in problem["errors"]]


def test_unknown_routes_are_problem_json(client: httpx.Client) -> None:
    assert_problem(client.get("/nope"), 404, "http-error")


# ---------------------------------------------------------------- runs over any resource


def test_a_resource_naming_the_case_runs_exactly_as_the_case_id_shorthand(client: httpx.Client) -> None:
    key = f"resource-{uuid.uuid4()}"
    run = start_run(client, {"resource": {"case_id": "C-102"}}, **{"Idempotency-Key": key})
    shorthand = start_run(client, {"case_id": "C-102"}, **{"Idempotency-Key": key})
    both = start_run(
        client, {"case_id": "C-102", "resource": {"case_id": "C-102"}}, **{"Idempotency-Key": key}
    )

    assert run.status_code == 201, run.text
    assert run.json()["result"] == C102_RESULT
    assert run.json()["resource"] == {"case_id": "C-102"}
    assert run.json()["case_id"] == "C-102"  # still there for clients written before resources
    assert (shorthand.status_code, both.status_code) == (200, 200)  # the same request: replays
    assert shorthand.json()["run_id"] == both.json()["run_id"] == run.json()["run_id"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"case_id": "C-102", "resource": {"case_id": "C-101"}}, id="case-and-resource-disagree"),
        pytest.param({"case_id": "C-102", "resource": {"root": "/srv"}}, id="case-beside-another-resource"),
        pytest.param({"resource": {f"k{index}": "v" for index in range(17)}}, id="too-many-keys"),
        pytest.param({"resource": {"case_id": 102}}, id="not-a-string"),
        pytest.param({"resource": {"case id": "C-102"}}, id="key-off-the-pattern"),
        pytest.param({"resource": {"k" * 65: "C-102"}}, id="key-too-long"),
        pytest.param({"resource": {"case_id": "C-102\u0000"}}, id="nul-in-a-value"),
    ],
)
def test_a_resource_of_the_wrong_shape_is_a_422_that_starts_nothing(
    client: httpx.Client, body: dict[str, Any]
) -> None:
    assert_problem(start_run(client, body), 422, "invalid-request")


def test_a_resource_key_no_tool_uses_is_a_422_naming_the_key(client: httpx.Client) -> None:
    response = start_run(client, {"resource": {"case_id": "C-102", "repo": "raydag"}})

    problem = assert_problem(response, 422, "resource-mismatch")
    assert problem["unused"] == ["repo"]
    assert "'repo'" in problem["detail"]


def test_a_plan_whose_tool_needs_a_key_the_resource_lacks_is_a_422_naming_the_key(
    client: httpx.Client, tool_server: RunningToolServer
) -> None:
    plan = {"nodes": [{"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}}]}
    calls_before = sum(tool_server.server.calls.values())

    response = start_run(client, {"resource": {"root": "/srv/reports"}, "plan": plan})

    problem = assert_problem(response, 422, "resource-mismatch")
    assert problem["missing"] == {"case_id": ["caseops_get_case_snapshot"]}
    assert "'case_id'" in problem["detail"]
    assert sum(tool_server.server.calls.values()) == calls_before

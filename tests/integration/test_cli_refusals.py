"""A refusal reaches the person at the terminal whole: the API's detail, then each field at fault and every
member the API adds (the planners it knows, …), from the real API and from ``raydag run``'s own supervisor."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx

from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, auth, raydag_cli
from tests.integration.test_cli import environment, home_fixture, raydag

home = home_fixture("cli-problems")


def test_a_decision_quoting_a_malformed_hash_says_the_hash_is_what_is_wrong(api: str) -> None:
    run_id, operation_id = uuid.uuid4(), uuid.uuid4()

    done = raydag_cli(
        "approvals",
        "approve",
        str(run_id),
        str(operation_id),
        "--hash",
        "deadbeef",
        url=api,
        key=APPROVER_KEY,
    )

    assert done.returncode == 2, done.stdout + done.stderr
    headline, *fields = done.stderr.strip().splitlines()
    assert headline.endswith("(invalid-request): the request does not have the expected shape"), headline
    assert fields == [
        "  /body/args_hash: not a hash as the listing shows it: a SHA-256 is 64 characters 0-9 and a-f (this is "
        "8); copy it whole from the listing, `raydag inbox` or `raydag approvals list`"
    ]


def test_run_with_a_mistyped_planner_lists_the_planners_there_are(dsn: str, home: Path) -> None:
    done = raydag("run", "C-102", "--planner", "conformanse", env=environment(home, RAYDAG_DATABASE_URL=dsn))

    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()  # Ray's own warnings come first
    start = lines.index("no run was started (unknown-planner): the planner is not available")
    planner, known = lines[start + 1 : start + 3]
    assert planner == "  planner: conformanse"
    assert known.startswith("  known: ")
    assert {"conformance", "outputs"} <= set(known.removeprefix("  known: ").split(", ")), known


def test_run_naming_a_model_its_tenant_may_not_use_is_refused_naming_those_it_may(
    dsn: str, home: Path
) -> None:
    policy = '{"tenant-demo": {"models": ["gpt-4.1-nano"]}}'
    env = environment(
        home,
        RAYDAG_DATABASE_URL=dsn,
        OPENAI_API_KEY="sk-test-not-a-real-key",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",  # never asked: the refusal comes first
        RAYDAG_MODEL="gpt-4.1-mini",
        RAYDAG_TENANT_POLICY=policy,
    )

    done = raydag("run", "C-102", "--planner", "openai", "--model", "gpt-5-pro", env=env)

    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    start = next(index for index, line in enumerate(lines) if "(model-not-allowed)" in line)
    assert lines[start].endswith(
        "model 'gpt-5-pro' is not allowed for this tenant's runs; allowed: 'gpt-4.1-mini', 'gpt-4.1-nano'"
    ), lines[start]


def test_a_model_named_over_the_api_for_a_planner_without_one_is_a_422_and_the_cli_says_so(
    api: str, client: httpx.Client
) -> None:
    response = client.post("/runs", json={"case_id": "C-102", "model": "gpt-4.1"}, headers=auth(DEMO_KEY))

    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["type"].endswith("/model-not-allowed")
    assert (
        response.json()["detail"] == "planner 'conformance' plans with no model: a run of it cannot name one"
    )

    done = raydag_cli("run", "C-102", "--model", "gpt-4.1", url=api, key=DEMO_KEY)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "(model-not-allowed): planner 'conformance' plans with no model" in done.stderr


def test_a_batch_naming_a_model_its_planner_cannot_use_rejects_each_case_with_the_problem(
    api: str, home: Path
) -> None:
    cases = home / "cases.txt"
    cases.write_text("C-101\nC-102\n")
    report = home / "model-report.json"

    done = raydag_cli(
        "batch", str(cases), "--report", str(report), "--model", "gpt-4.1", url=api, key=DEMO_KEY
    )

    assert done.returncode != 0, done.stdout + done.stderr
    rows = {row["case_id"]: row for row in json.loads(report.read_text())["cases"]}
    assert {case: (row["status"], row["stop_reason"]) for case, row in rows.items()} == {
        "C-101": ("rejected", "model-not-allowed"),
        "C-102": ("rejected", "model-not-allowed"),
    }
    assert all(row["run_id"] is None for row in rows.values())

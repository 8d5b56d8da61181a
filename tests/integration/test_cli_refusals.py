"""A refusal reaches the person at the terminal whole: the API's detail, then each field at fault and every
member the API adds (the planners it knows, …), from the real API and from ``raydag run``'s own supervisor."""

from __future__ import annotations

import uuid
from pathlib import Path

from tests.integration.conftest import APPROVER_KEY, raydag_cli
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

"""Which planner a run gets when it names none (real Ray, PostgreSQL and MCP): a plan over a third-party toolset
is judged by ``outputs`` and completes; without a plan, the toolsets' own planner plans, and where they declare
none the request is refused saying what to set; a planner that needs tools the run cannot use refuses the run."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.policy import Principal
from tests.conftest import REPO
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.test_cli import TOY_TOOLSETS, environment, home_fixture, raydag
from tests.integration.toolset_servers import toy_toolsets

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"toy:read"}))
ECHO = {"nodes": [{"id": "hello", "tool": "echo", "args": {"text": "hello"}}]}
CONFORMANCE = "mcp_server.planner:ConformancePlanner"

home = home_fixture("planner-choice")


async def test_over_a_third_party_toolset_a_plan_naming_no_planner_completes_and_nothing_else_is_guessed(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore
) -> None:
    import ray

    from actors.api.views import load_state

    name = f"raydag-test-planner-choice-{uuid.uuid4().hex[:6]}"
    # The toy toolsets declare no planner of their own; caseops' conformance planner is offered beside them.
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=toy_toolsets(), planners=(CONFORMANCE,)
    )
    try:
        planned = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={}, plan=ECHO))
        assert planned.outcome is Submission.CREATED, planned
        assert await supervisor.wait.remote(planned.run_id, 60.0)
        state = await load_state(store, planned.run_id)
        unplanned = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={}))
        lacking = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={}, plan=ECHO, planner="conformance")
        )
    finally:
        ray.kill(supervisor)

    assert (state.status.value, state.stop_reason, state.planner) == ("completed", None, "outputs")
    assert state.result is not None
    assert state.result["outputs"]["hello"]["text"] == "hello"
    assert unplanned.outcome is Submission.NO_PLANNER
    assert sorted(unplanned.error["known"]) == ["conformance", "outputs"]
    refusal = unplanned.refusal()
    assert refusal is not None
    assert (refusal.status, refusal.problem) == (422, "unknown-planner")
    assert lacking.outcome is Submission.PLANNER_LACKS_TOOLS
    assert lacking.error == {
        "planner": "conformance",
        "missing": [
            "caseops_get_case_snapshot",
            "caseops_get_policy_requirements",
            "caseops_list_unclassified_documents",
            "caseops_resolve_document_alias",
        ],
    }


def test_the_cli_runs_a_plan_over_the_toolsets_it_names_without_being_told_the_planner(
    dsn: str, home: Path
) -> None:
    toolsets = home / "toolsets.yaml"
    toy = REPO / "tests" / "integration" / "toy_mcp_server.py"
    toolsets.write_text(TOY_TOOLSETS.format(python=sys.executable, toy=toy))
    plan = home / "plan.json"
    plan.write_text(json.dumps(ECHO))

    done = raydag(
        "run",
        "--plan",
        str(plan),
        "--toolsets",
        str(toolsets),
        "--json",
        env=environment(home, RAYDAG_DATABASE_URL=dsn),
    )

    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert (report["run"]["status"], report["run"]["planner"]) == ("completed", "outputs")
    assert report["run"]["result"]["outputs"]["hello"]["text"] == "hello"


def test_the_cli_refuses_a_planner_that_cannot_judge_the_runs_tools_naming_them_with_exit_2(
    dsn: str, home: Path
) -> None:
    toolsets = home / "toolsets.yaml"
    toy = REPO / "tests" / "integration" / "toy_mcp_server.py"
    toolsets.write_text(TOY_TOOLSETS.format(python=sys.executable, toy=toy))
    plan = home / "plan.json"
    plan.write_text(json.dumps(ECHO))

    done = raydag(
        "run",
        "--plan",
        str(plan),
        "--planner",
        "conformance",
        "--toolsets",
        str(toolsets),
        env=environment(home, RAYDAG_DATABASE_URL=dsn, RAYDAG_PLANNERS=CONFORMANCE),
    )

    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "planner-lacks-tools" in done.stderr
    assert "caseops_get_case_snapshot" in done.stderr

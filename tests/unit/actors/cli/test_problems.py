"""A refusal's members as the terminal prints them: one line each, what the first line says left out."""

from __future__ import annotations

from actors.cli.problems import members, refusal_of
from actors.run.submission import Submission, SubmitResult
from dag.errors import PlanErrorCode, PlanInvalid


def test_each_field_at_fault_and_each_member_gets_a_line_of_its_own() -> None:
    answer = {
        "type": "https://raydag.dev/problems/budget-above-limit",
        "title": "Unprocessable Entity",
        "status": 422,
        "detail": "max_nodes 100 is above the server's limit 64",
        "instance": "/runs",
        "errors": [{"location": "/body/budgets/max_nodes", "message": "Input should be a valid integer"}],
        "above": {"max_nodes": {"requested": 100, "limit": 64}},
        "known": ["conformance", "outputs"],
        "run_id": None,
    }

    assert members(answer, str(answer["detail"])) == (
        "/body/budgets/max_nodes: Input should be a valid integer",
        "above: max_nodes (requested 100, limit 64)",
        "known: conformance, outputs",
    )


def test_a_plan_refused_names_its_location_and_code_without_repeating_its_message() -> None:
    error = PlanInvalid(
        PlanErrorCode.UNKNOWN_TOOL,
        "tool 'nope' is not in this run's tool catalogue",
        node_id="hello",
        location="/nodes/0/tool",
    )

    refused = refusal_of(
        SubmitResult(Submission.PLAN_INVALID, error=error.as_dict()), resource={}, tenant="tenant-demo"
    )

    assert refused is not None
    assert (refused.line, refused.exit_code) == (
        "no run was started (plan-invalid): tool 'nope' is not in this run's tool catalogue; "
        "plan_error: code UNKNOWN_TOOL, node_id hello, location /nodes/0/tool",
        2,
    )

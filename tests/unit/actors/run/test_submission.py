"""A refused submission has one wording, ``SubmitResult.refusal()``: the API answers it as a problem, the CLI
prints it with its exit code, the Python API raises it. And a request hashes with its planner resolved."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actors.api import Problem, raise_for_submission
from actors.cli.problems import Refused, refusal_of
from actors.cli.report import EXIT_BAD_INPUT, EXIT_RUN_FAILED
from actors.python_api.session import RunRefused
from actors.run.submission import RunRequest, Submission, SubmitResult
from dag.fingerprint import sha256_hex
from dag.policy import Principal

ERRORS = {
    Submission.RESOURCE_NOT_FOUND: {"problem": "case-not-found", "detail": "no case with this id was found"},
    Submission.RESOURCE_CHECK_UNAVAILABLE: {"message": "the check timed out"},
    Submission.IDEMPOTENCY_CONFLICT: None,
    Submission.RESOURCE_MISMATCH: {"message": "no tool uses 'repo'", "missing": {}, "unused": ["repo"]},
    Submission.PLAN_INVALID: {
        "code": "EMPTY_PLAN",
        "message": "a plan needs a node",
        "node_id": None,
        "location": "/nodes",
    },
    Submission.UNKNOWN_PLANNER: {"planner": "gpt", "known": ["conformance", "outputs"]},
    Submission.NO_PLANNER: {"known": ["outputs"]},
    Submission.PLANNER_UNAVAILABLE: {"planner": "openai", "reason": "needs OPENAI_API_KEY"},
    Submission.MODEL_NOT_ALLOWED: {"model": "gpt-big", "planner": "openai", "allowed": ["gpt-test"]},
    Submission.PLANNER_LACKS_TOOLS: {"planner": "conformance", "missing": ["caseops_get_case_snapshot", "x"]},
    Submission.UNKNOWN_STAGE: {"stage": "deploy", "known": ["act", "investigate"]},
    Submission.BUDGET_ABOVE_LIMIT: {
        "message": "too much",
        "above": {"max_nodes": {"requested": 9, "limit": 8}},
    },
    Submission.UNAVAILABLE: {"message": "connection refused"},
    Submission.SHUTTING_DOWN: None,
    Submission.RUN_NOT_FOUND: None,
    Submission.RUN_NOT_FINISHED: {"run_status": "running"},
    Submission.RUN_NOT_CONTINUABLE: {"run_status": "completed", "stop_reason": None},
    Submission.HISTORY_PRUNED: None,
    Submission.ALREADY_CONTINUED: None,
}
ANSWERED = {
    Submission.RESOURCE_NOT_FOUND: (404, "case-not-found", None),
    Submission.RESOURCE_CHECK_UNAVAILABLE: (503, "resource-check-unavailable", "1"),
    Submission.IDEMPOTENCY_CONFLICT: (409, "idempotency-key-reused", None),
    Submission.RESOURCE_MISMATCH: (422, "resource-mismatch", None),
    Submission.PLAN_INVALID: (422, "plan-invalid", None),
    Submission.UNKNOWN_PLANNER: (422, "unknown-planner", None),
    Submission.NO_PLANNER: (422, "unknown-planner", None),
    Submission.PLANNER_UNAVAILABLE: (422, "planner-unavailable", None),
    Submission.MODEL_NOT_ALLOWED: (422, "model-not-allowed", None),
    Submission.PLANNER_LACKS_TOOLS: (422, "planner-lacks-tools", None),
    Submission.UNKNOWN_STAGE: (422, "unknown-stage", None),
    Submission.BUDGET_ABOVE_LIMIT: (422, "budget-above-limit", None),
    Submission.UNAVAILABLE: (503, "database-unavailable", "5"),
    Submission.SHUTTING_DOWN: (503, "shutting-down", "1"),
    Submission.RUN_NOT_FOUND: (404, "run-not-found", None),
    Submission.RUN_NOT_FINISHED: (409, "run-not-finished", None),
    Submission.RUN_NOT_CONTINUABLE: (409, "run-not-continuable", None),
    Submission.HISTORY_PRUNED: (410, "history-pruned", None),
    Submission.ALREADY_CONTINUED: (409, "run-already-continued", None),
}
"""Each refusal's HTTP status, problem type and ``Retry-After``, as the API has always answered them."""


def refused(outcome: Submission) -> SubmitResult:
    names_a_run = outcome in (Submission.IDEMPOTENCY_CONFLICT, Submission.ALREADY_CONTINUED)
    return SubmitResult(outcome, run_id="run-9" if names_a_run else None, error=ERRORS[outcome])


def problem_of(submitted: SubmitResult, *, visible: bool = True) -> Problem:
    with pytest.raises(Problem) as raised:
        raise_for_submission(submitted, conflicting_run_visible=visible)
    return raised.value


def test_every_refusal_has_a_wording() -> None:
    assert set(ANSWERED) == set(Submission) - {Submission.CREATED, Submission.REPLAYED}


@pytest.mark.parametrize("outcome", sorted(ANSWERED), ids=str)
def test_the_api_answers_each_refusal_with_its_status_problem_type_and_retry_after(
    outcome: Submission,
) -> None:
    problem = problem_of(refused(outcome))

    assert (problem.status, problem.slug, problem.headers.get("Retry-After")) == ANSWERED[outcome]


@pytest.mark.parametrize("outcome", [Submission.CREATED, Submission.REPLAYED])
def test_a_created_or_replayed_run_is_no_refusal(outcome: Submission) -> None:
    submitted = SubmitResult(outcome, run_id="run-1")

    assert submitted.refusal() is None
    assert raise_for_submission(submitted, conflicting_run_visible=True) is None
    assert refusal_of(submitted, resource={"case_id": "C-1"}, tenant="t") is None


def test_the_api_details_and_fields_are_those_it_always_gave() -> None:
    assert problem_of(refused(Submission.UNKNOWN_PLANNER)).detail == "the planner is not available"
    assert problem_of(refused(Submission.UNKNOWN_PLANNER)).extra == {
        "planner": "gpt",
        "known": ["conformance", "outputs"],
    }
    mismatch = problem_of(refused(Submission.RESOURCE_MISMATCH))
    assert (mismatch.detail, mismatch.extra) == ("no tool uses 'repo'", {"missing": {}, "unused": ["repo"]})
    invalid = problem_of(refused(Submission.PLAN_INVALID))
    assert (invalid.detail, invalid.extra["plan_error"]["code"]) == ("a plan needs a node", "EMPTY_PLAN")
    unavailable = problem_of(refused(Submission.PLANNER_UNAVAILABLE))
    assert (unavailable.detail, unavailable.extra) == ("needs OPENAI_API_KEY", {"planner": "openai"})
    budget = problem_of(refused(Submission.BUDGET_ABOVE_LIMIT))
    assert (budget.detail, budget.extra) == (
        "too much",
        {"above": {"max_nodes": {"requested": 9, "limit": 8}}},
    )
    database = problem_of(refused(Submission.UNAVAILABLE))
    assert database.detail == "the run store cannot be reached; nothing was accepted, retry later"


def test_an_idempotency_conflict_names_the_run_only_to_a_requester_who_may_read_it() -> None:
    assert problem_of(refused(Submission.IDEMPOTENCY_CONFLICT), visible=True).extra == {"run_id": "run-9"}
    assert problem_of(refused(Submission.IDEMPOTENCY_CONFLICT), visible=False).extra == {}


def test_a_planner_lacking_tools_is_a_422_naming_the_planner_and_the_tools() -> None:
    problem = problem_of(refused(Submission.PLANNER_LACKS_TOOLS))

    assert problem.extra == {"planner": "conformance", "missing": ["caseops_get_case_snapshot", "x"]}
    assert problem.detail == (
        "planner 'conformance' cannot plan or judge a run without caseops_get_case_snapshot, x, "
        "which this run cannot use"
    )


def test_no_planner_says_what_to_set() -> None:
    problem = problem_of(refused(Submission.NO_PLANNER))

    assert "--planner" in problem.detail
    assert "give a plan" in problem.detail
    assert problem.extra == {"known": ["outputs"]}


@pytest.mark.parametrize("outcome", sorted(ANSWERED), ids=str)
def test_the_cli_exits_2_when_the_request_must_change_and_1_when_it_may_be_retried(
    outcome: Submission,
) -> None:
    refusal = refusal_of(refused(outcome), resource={"case_id": "C-9"}, tenant="tenant-a")

    assert isinstance(refusal, Refused)
    assert refusal.exit_code == (EXIT_BAD_INPUT if ANSWERED[outcome][0] < 500 else EXIT_RUN_FAILED)
    assert refusal.text.startswith("[red]")


def test_the_cli_says_which_tools_a_planner_lacks() -> None:
    refusal = refusal_of(refused(Submission.PLANNER_LACKS_TOOLS), resource={"root": "/srv"}, tenant="t")

    assert isinstance(refusal, Refused)
    assert refusal.exit_code == EXIT_BAD_INPUT == 2
    assert "caseops_get_case_snapshot, x" in refusal.text
    assert "planner-lacks-tools" in refusal.text


def test_the_cli_says_an_unknown_case_was_not_found_for_the_tenant_and_how_to_load_data() -> None:
    refusal = refusal_of(
        refused(Submission.RESOURCE_NOT_FOUND), resource={"case_id": "C-9"}, tenant="tenant-a"
    )

    assert isinstance(refusal, Refused)
    assert refusal.exit_code == EXIT_BAD_INPUT
    assert "case 'C-9' was not found for tenant 'tenant-a'" in refusal.text
    assert "raydag seed" in refusal.text


def test_the_python_api_raises_the_refusal_with_its_outcome_and_detail() -> None:
    error = RunRefused(Submission.PLANNER_LACKS_TOOLS, ERRORS[Submission.PLANNER_LACKS_TOOLS])

    assert error.outcome is Submission.PLANNER_LACKS_TOOLS
    assert str(error).startswith(
        "no run was started (planner_lacks_tools): planner 'conformance' cannot plan"
    )


# ---------------------------------------------------------------- the idempotency fingerprint

PRINCIPAL = Principal("tenant-demo", "alice", frozenset({"cases:read"}))


def test_a_request_naming_no_planner_defaults_to_none_until_submission_resolves_it() -> None:
    assert RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}).planner is None


def test_a_caseops_request_resolved_to_its_toolsets_planner_hashes_as_the_old_conformance_default() -> None:
    request = RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, idempotency_key="k")
    legacy = sha256_hex(
        {
            "subject": "alice",
            "scopes": ["cases:read"],
            "case_id": "C-102",
            "goal": request.goal,
            "planner": "conformance",
            "plan": None,
            "budgets": None,
        }
    )

    assert replace(request, planner="conformance").fingerprint() == legacy
    assert replace(request, planner="outputs").fingerprint() != legacy


def test_a_model_not_allowed_names_the_model_and_what_the_tenant_may_use() -> None:
    problem = problem_of(refused(Submission.MODEL_NOT_ALLOWED))

    assert (problem.status, problem.slug) == (422, "model-not-allowed")
    assert problem.detail == "model 'gpt-big' is not allowed for this tenant's runs; allowed: 'gpt-test'"
    assert problem.extra == {"model": "gpt-big", "planner": "openai", "allowed": ["gpt-test"]}


def test_a_model_named_for_a_planner_without_one_is_refused_as_such() -> None:
    submitted = SubmitResult(
        Submission.MODEL_NOT_ALLOWED, error={"model": "m", "planner": "outputs", "allowed": []}
    )

    assert (
        problem_of(submitted).detail == "planner 'outputs' plans with no model: a run of it cannot name one"
    )


def test_a_request_naming_a_model_hashes_apart_and_one_naming_none_hashes_as_before() -> None:
    plain = RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, planner="openai")

    assert replace(plain, model=None).fingerprint() == plain.fingerprint()
    assert replace(plain, model="gpt-small").fingerprint() != plain.fingerprint()

"""A child run refused by its admission fails its agent node with a code saying who must act."""

from __future__ import annotations

from actors.run.children import AGENT_REFUSED, _refusal
from actors.run.submission import Submission, SubmitResult
from dag.events import ErrorKind


def test_a_childs_model_refused_by_its_tenants_policy_is_an_authorization_failure_naming_the_model() -> None:
    refused = SubmitResult(
        Submission.MODEL_NOT_ALLOWED, error={"model": "gpt-big", "planner": "openai", "allowed": ["gpt-test"]}
    )

    error = _refusal(refused)

    assert (error.code, error.kind) == ("AGENT_MODEL_NOT_ALLOWED", ErrorKind.AUTHORIZATION)
    assert "model-not-allowed: model 'gpt-big' is not allowed" in error.message


def test_any_other_refusal_of_a_child_is_agent_refused_with_the_problem_in_its_message() -> None:
    refused = SubmitResult(Submission.UNKNOWN_PLANNER, error={"planner": "elsewhere", "known": ["outputs"]})

    error = _refusal(refused)

    assert (error.code, error.kind) == (AGENT_REFUSED, ErrorKind.CONTRACT)
    assert error.message.startswith("the child run was refused: unknown-planner: ")

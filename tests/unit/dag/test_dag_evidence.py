"""``missing_evidence``: the calls of a run that have no answer, so that no verdict may rest on them."""

from __future__ import annotations

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    POLICY_TOOL,
    dispatched,
    failed,
    running,
    succeeded,
)

from dag.events import ErrorKind, NodeDenied, NodeError, NodeFailed
from dag.evidence import NOT_RUN, UNAVAILABLE_RULES, MissingEvidence, describe_missing, missing_evidence
from dag.fingerprint import action_fingerprint
from dag.policy import Decision

ARGS = {"case_id": CASE_ID}
PLAN = {
    "nodes": [
        {"id": "case", "tool": CASE_TOOL, "args": ARGS},
        {"id": "again", "tool": CASE_TOOL, "args": ARGS},
        {"id": "policy", "tool": POLICY_TOOL, "args": ARGS},
    ]
}


def ended(node_id: str, kind: ErrorKind, code: str) -> NodeFailed:
    error = NodeError(kind=kind, code=code, message="x")
    return NodeFailed(at=AT, node_id=node_id, error=error, started_at=AT, finished_at=AT)


@pytest.mark.parametrize("kind", [ErrorKind.TRANSIENT, ErrorKind.PROTOCOL, ErrorKind.UNKNOWN_EFFECT])
def test_a_call_that_failed_for_an_infrastructure_reason_is_missing(kind: ErrorKind) -> None:
    state = running(PLAN, dispatched("policy", POLICY_TOOL, ARGS), ended("policy", kind, "X_FAILED"))

    assert missing_evidence(state) == (MissingEvidence("policy", POLICY_TOOL, "X_FAILED"),)


@pytest.mark.parametrize("kind", [ErrorKind.BUSINESS, ErrorKind.AUTHORIZATION, ErrorKind.CONTRACT])
def test_a_call_the_tool_or_the_policy_answered_is_not_missing(kind: ErrorKind) -> None:
    state = running(PLAN, dispatched("policy", POLICY_TOOL, ARGS), ended("policy", kind, "REFUSED"))

    assert missing_evidence(state) == ()


def test_an_identical_action_that_was_answered_covers_for_a_failed_one() -> None:
    state = running(
        PLAN,
        dispatched("case", CASE_TOOL, ARGS),
        failed("case"),
        dispatched("again", CASE_TOOL, ARGS),
        succeeded("again", CASE_OUTPUT),
    )

    assert missing_evidence(state) == ()


def test_after_a_drained_round_a_node_that_did_not_run_is_missing_and_after_a_cut_short_one_it_is_not() -> (
    None
):
    state = running(PLAN, dispatched("case", CASE_TOOL, ARGS), succeeded("case", CASE_OUTPUT))

    assert missing_evidence(state) == ()  # the round was cut short: the planner judges unfinished calls
    assert [item.node_id for item in missing_evidence(state, drained=True)] == ["again", "policy"]
    assert {item.code for item in missing_evidence(state, drained=True)} == {NOT_RUN}


def test_the_description_names_each_missing_call_and_counts_the_rest() -> None:
    missing = tuple(MissingEvidence(f"resolve[{index}]", "t", "WORKER_FAILED") for index in range(25))

    text = describe_missing(missing, limit=2)

    assert text == (
        "evidence is incomplete: 25 calls have no answer: resolve[0] (t: WORKER_FAILED), "
        "resolve[1] (t: WORKER_FAILED) and 23 more"
    )


@pytest.mark.parametrize("rule", sorted(UNAVAILABLE_RULES))
def test_a_node_of_a_tool_that_could_not_be_asked_is_missing_whether_denied_or_failed_on_retry(
    rule: str,
) -> None:
    state = running(
        PLAN,
        denied("case", rule),
        dispatched("policy", POLICY_TOOL, ARGS),
        ended("policy", ErrorKind.AUTHORIZATION, rule),
    )

    assert missing_evidence(state) == (
        MissingEvidence("case", CASE_TOOL, rule),
        MissingEvidence("policy", POLICY_TOOL, rule),
    )


def test_a_node_the_policy_denied_is_an_answer_not_a_gap() -> None:
    assert missing_evidence(running(PLAN, denied("case", "resource.case_bound"))) == ()


def denied(node_id: str, rule: str) -> NodeDenied:
    decision = Decision(allowed=False, rule_id=rule, reason="denied")
    fingerprint = action_fingerprint(CASE_TOOL, ARGS)
    return NodeDenied(
        at=AT, node_id=node_id, tool=CASE_TOOL, args=ARGS, fingerprint=fingerprint, decision=decision
    )

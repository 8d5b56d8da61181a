"""Retries: which failures are tried again and after how long, and how a retry folds into the run."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    PROPERTY_SETTINGS,
    dispatched,
    running,
    succeeded,
)
from hypothesis import given
from hypothesis import strategies as st

from dag.contracts import Risk
from dag.errors import IllegalTransition
from dag.events import ErrorKind, NodeError, NodeFailed, NodeRetryScheduled, RunFinished
from dag.fingerprint import action_fingerprint
from dag.retry import RetryPolicy
from dag.states import NodeStatus, RunStatus
from mcp_server.contracts import GET_CASE_SNAPSHOT

POLICY = RetryPolicy(base_s=0.1, cap_s=2.0)
TRANSIENT = NodeError(kind=ErrorKind.TRANSIENT, code="UPSTREAM_DOWN", message="503")
AMPLE_S = 1_000.0
CASE_ARGS = {"case_id": CASE_ID}
PLAN = {"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]}


def next_delay(
    error: NodeError = TRANSIENT,
    *,
    attempt: int = 1,
    remaining_s: float = AMPLE_S,
    seed: int = 0,
    **contract_changes: Any,
) -> float | None:
    contract = dataclasses.replace(GET_CASE_SNAPSHOT, **contract_changes)
    return POLICY.next_delay(
        contract, error, attempt=attempt, remaining_s=remaining_s, rng=random.Random(seed)
    )


# ---------------------------------------------------------------- the policy


def test_a_transient_failure_of_a_read_only_tool_is_retried_after_a_jittered_backoff() -> None:
    delay = next_delay(attempt=1)

    assert delay is not None
    assert 0 <= delay <= 0.1


@pytest.mark.parametrize("kind", sorted(set(ErrorKind) - {ErrorKind.TRANSIENT}))
def test_a_failure_that_is_not_transient_is_final(kind: ErrorKind) -> None:
    error = NodeError(kind=kind, code="X", message="x")

    assert next_delay(error) is None


@pytest.mark.parametrize("risk", [Risk.REVERSIBLE_WRITE, Risk.IRREVERSIBLE_WRITE])
def test_a_tool_that_is_not_idempotent_is_never_retried(risk: Risk) -> None:
    assert next_delay(risk=risk) is None


def test_the_last_allowed_attempt_is_final_and_the_one_before_it_is_not() -> None:
    assert next_delay(attempt=2, max_attempts=3) is not None
    assert next_delay(attempt=3, max_attempts=3) is None


def test_a_tool_allowed_one_attempt_is_never_retried() -> None:
    assert next_delay(attempt=1, max_attempts=1) is None


def test_a_retry_that_could_not_finish_before_the_deadline_is_not_scheduled() -> None:
    # The wait is at most 0.1 s and the call may take timeout_s = 10 s.
    assert next_delay(remaining_s=10.0 + 0.1 + 0.001) is not None
    assert next_delay(remaining_s=9.99) is None


def test_the_same_seed_gives_the_same_delay() -> None:
    assert next_delay(seed=42) == next_delay(seed=42)


@PROPERTY_SETTINGS
@given(attempt=st.integers(min_value=1, max_value=30), seed=st.integers(min_value=0, max_value=2**32))
def test_every_delay_lies_between_zero_and_the_capped_exponential_backoff(attempt: int, seed: int) -> None:
    delay = POLICY.delay(attempt, random.Random(seed))

    assert 0 <= delay <= min(POLICY.cap_s, POLICY.base_s * 2 ** (attempt - 1))


def test_the_backoff_grows_with_the_attempt_until_the_cap() -> None:
    class Highest(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    assert [POLICY.delay(attempt, Highest()) for attempt in range(1, 8)] == [
        0.1,
        0.2,
        0.4,
        0.8,
        1.6,
        2.0,
        2.0,
    ]


# ---------------------------------------------------------------- the reducer


def retry_scheduled(attempt: int = 1) -> NodeRetryScheduled:
    return NodeRetryScheduled(
        at=AT, node_id="case", attempt=attempt, error=TRANSIENT, delay_s=0.05, started_at=AT, finished_at=AT
    )


def redispatched(attempt: int) -> Any:
    return dispatched("case", CASE_TOOL, CASE_ARGS).model_copy(update={"attempt": attempt})


def test_a_scheduled_retry_leaves_the_node_retrying_with_the_error_of_its_attempt() -> None:
    state = running(PLAN, dispatched("case", CASE_TOOL, CASE_ARGS), retry_scheduled())

    case = state.nodes["case"]
    assert (case.status, case.error, case.attempts) == (NodeStatus.RETRYING, TRANSIENT, 1)
    assert [node.node_id for node in state.in_flight()] == ["case"]  # a recovery must dispatch it again


def test_the_retry_is_the_next_attempt_of_the_same_proposal() -> None:
    fingerprint = action_fingerprint(CASE_TOOL, CASE_ARGS)

    state = running(
        PLAN,
        dispatched("case", CASE_TOOL, CASE_ARGS),
        retry_scheduled(),
        redispatched(2),
        succeeded("case", CASE_OUTPUT),
    )

    case = state.nodes["case"]
    assert (case.status, case.attempts, case.output) == (NodeStatus.SUCCEEDED, 2, CASE_OUTPUT)
    assert state.proposals == {fingerprint: 1}
    assert state.fingerprints == {fingerprint: "case"}


def test_a_retry_skipping_an_attempt_number_is_refused() -> None:
    with pytest.raises(ValueError, match="attempt 3 after 1"):
        running(PLAN, dispatched("case", CASE_TOOL, CASE_ARGS), retry_scheduled(), redispatched(3))


def test_a_retrying_node_may_still_fail_for_good() -> None:
    # A retry that is refused by the policy at its re-dispatch fails the node without running.
    error = NodeError(kind=ErrorKind.AUTHORIZATION, code="tool.unhealthy", message="out of service")

    state = running(
        PLAN,
        dispatched("case", CASE_TOOL, CASE_ARGS),
        retry_scheduled(),
        NodeFailed(at=AT, node_id="case", error=error),
    )

    assert (state.nodes["case"].status, state.nodes["case"].error) == (NodeStatus.FAILED, error)


def test_a_retrying_node_cannot_succeed_without_being_dispatched_again() -> None:
    with pytest.raises(IllegalTransition) as caught:
        running(
            PLAN, dispatched("case", CASE_TOOL, CASE_ARGS), retry_scheduled(), succeeded("case", CASE_OUTPUT)
        )

    assert (caught.value.source, caught.value.target) == ("retrying", "succeeded")


def test_a_run_finishing_while_a_retry_waits_cancels_the_node() -> None:
    state = running(
        PLAN,
        dispatched("case", CASE_TOOL, CASE_ARGS),
        retry_scheduled(),
        RunFinished(at=AT, status=RunStatus.CANCELLED),
    )

    assert state.nodes["case"].status is NodeStatus.CANCELLED


def test_a_task_is_followed_again_after_a_dead_workers_wait_until_its_followers_used_up_the_runtime_attempts() -> (
    None
):
    policy = RetryPolicy(base_s=1.0, cap_s=8.0, runtime_attempts=4)
    rng = random.Random(3)

    waits = [policy.refollow_delay(deaths, rng) for deaths in range(1, 5)]

    assert waits[-1] is None  # the fourth death: followed no more, the call failed
    bounds = [1.0, 2.0, 4.0]
    assert all(wait is not None and 0 <= wait <= bound for wait, bound in zip(waits, bounds, strict=False))

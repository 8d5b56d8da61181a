"""The operation ledger's decisions: identity, legal moves, who may decide, what an outcome and a read mean."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dag.budget import Budgets
from dag.contracts import Risk
from dag.events import ErrorKind, NodeError
from dag.operations import (
    OPERATION_TRANSITIONS,
    TERMINAL_OPERATION_STATES,
    DecisionRefusal,
    Existence,
    OperationState,
    OperationView,
    approval_deadline,
    approval_for,
    approval_refusal,
    arguments_hash,
    call_arguments,
    call_meta,
    existence,
    intent_hash,
    joinable,
    may_still_land,
    outcome_state,
    overdue,
    reconcile_arguments,
    reconciled_output,
    reconciled_state,
    resolution_refusal,
    sources_of,
)
from dag.policy import TenantPolicy
from dag.writes import META_KEY, Approval, Intent, KeyCarrier, OperationSpec, Reconcile

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ARGS = {"case_id": "C-103", "draft_id": "DRAFT-1"}
STRICT = TenantPolicy()
FIND = Reconcile(
    tool="find",
    arguments=(("case_id", "case_id"), ("key", "$operation_id")),
    exists="found",
    output="request",
)


def view(state: OperationState = OperationState.AWAITING_APPROVAL, **changes: object) -> OperationView:
    values: dict[str, object] = {
        "operation_id": "op-1",
        "state": state,
        "args_hash": arguments_hash(ARGS),
        "risk": Risk.REVERSIBLE_WRITE,
        "subjects": frozenset({"requester"}),
        "expires_at": NOW + timedelta(minutes=5),
    }
    values.update(changes)
    return OperationView(**values)  # type: ignore[arg-type]


def test_the_same_arguments_are_the_same_intent_whatever_their_order() -> None:
    one = intent_hash(Intent(), {"a": 1, "b": [1, 2]})

    assert one == intent_hash(Intent(), {"b": [1, 2], "a": 1})
    assert one != intent_hash(Intent(), {"a": 2, "b": [1, 2]})
    assert one != intent_hash(Intent(), {"a": 1, "b": [2, 1]})


def test_an_intent_is_named_by_every_argument_unless_the_overlay_narrows_it() -> None:
    sent = {"case_id": "C-103", "draft_id": "DRAFT-1", "note": "first"}
    again = {**sent, "note": "a reminder"}
    by_case = Intent(arguments=("case_id", "draft_id"))

    assert intent_hash(Intent(), sent) == arguments_hash(sent)  # by default: the arguments' own hash
    assert intent_hash(Intent(), sent) != intent_hash(Intent(), again)
    assert intent_hash(by_case, sent) == intent_hash(by_case, again)  # the note names no intent
    assert intent_hash(by_case, sent) != intent_hash(by_case, {**sent, "draft_id": "DRAFT-2"})
    assert intent_hash(by_case, {"case_id": "C-103"}) != intent_hash(by_case, {**sent, "draft_id": None})


@pytest.mark.parametrize(
    "state",
    [
        OperationState.PROPOSED,
        OperationState.AWAITING_APPROVAL,
        OperationState.APPROVED,
        OperationState.EXECUTING,
        OperationState.UNKNOWN,  # it may have acted: a second operation could act twice
    ],
)
def test_an_intent_not_yet_settled_is_joined_however_old(state: OperationState) -> None:
    daily = Intent(window_s=86400)

    assert joinable(state, NOW - timedelta(days=30), daily, NOW)


def test_a_success_is_joined_within_its_window_and_forever_by_default() -> None:
    daily = Intent(window_s=86400)
    succeeded = OperationState.SUCCEEDED

    assert joinable(succeeded, NOW - timedelta(days=400), Intent(), NOW)
    assert joinable(succeeded, NOW - timedelta(hours=23), daily, NOW)
    assert not joinable(succeeded, NOW - timedelta(days=1), daily, NOW)  # a day on: a new operation


@pytest.mark.parametrize("state", [OperationState.FAILED, OperationState.REJECTED, OperationState.EXPIRED])
def test_an_intent_that_never_acted_is_proposed_anew(state: OperationState) -> None:
    assert not joinable(state, NOW, Intent(), NOW)


def test_an_operation_awaiting_a_person_is_overdue_from_its_deadline_on() -> None:
    awaiting = OperationState.AWAITING_APPROVAL

    assert overdue(awaiting, NOW, NOW)
    assert not overdue(awaiting, NOW + timedelta(seconds=1), NOW)
    assert not overdue(awaiting, None, NOW)
    assert not overdue(OperationState.APPROVED, NOW - timedelta(days=1), NOW)  # decided in time


def test_a_call_out_may_land_until_its_callers_limit() -> None:
    since = NOW - timedelta(seconds=10)

    assert may_still_land(since, call_limit_s=11, now=NOW)
    assert not may_still_land(since, call_limit_s=10, now=NOW)
    assert not may_still_land(None, call_limit_s=10, now=NOW)


def test_no_requester_of_a_shared_operation_decides_it_unless_the_tenant_allows() -> None:
    shared = view(subjects=frozenset({"first", "joiner"}))
    quoted = arguments_hash(ARGS)
    lenient = TenantPolicy(self_approval=frozenset({Risk.REVERSIBLE_WRITE}))

    def refusal(decider: str, policy: TenantPolicy = STRICT) -> DecisionRefusal | None:
        return approval_refusal(shared, quoted_hash=quoted, decider=decider, policy=policy, now=NOW)

    assert refusal("first") is DecisionRefusal.SELF_APPROVAL
    assert refusal("joiner") is DecisionRefusal.SELF_APPROVAL  # the run that joined asked for it too
    assert refusal("someone else") is None
    assert refusal("joiner", lenient) is None


def test_every_state_is_in_the_table_and_the_terminal_ones_lead_nowhere() -> None:
    assert set(OPERATION_TRANSITIONS) == set(OperationState)
    for state in TERMINAL_OPERATION_STATES:
        assert OPERATION_TRANSITIONS[state] == frozenset()
    assert OperationState.UNKNOWN not in TERMINAL_OPERATION_STATES  # it waits for a read or a person


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (OperationState.PROPOSED, OperationState.EXECUTING),  # never executed unvalidated, unapproved
        (OperationState.AWAITING_APPROVAL, OperationState.EXECUTING),
        (OperationState.EXECUTING, OperationState.APPROVED),  # never executed twice on one approval
        (OperationState.UNKNOWN, OperationState.EXECUTING),  # an unknown outcome is never retried blindly
        (OperationState.REJECTED, OperationState.APPROVED),
        (OperationState.SUCCEEDED, OperationState.EXECUTING),
    ],
)
def test_the_moves_that_would_execute_a_write_twice_or_unapproved_are_illegal(
    source: OperationState, target: OperationState
) -> None:
    assert source not in sources_of(target)  # so no conditional update ever makes it


def test_only_an_approved_operation_may_start_executing() -> None:
    assert sources_of(OperationState.EXECUTING) == frozenset({OperationState.APPROVED})
    assert sources_of(OperationState.APPROVED) == frozenset(
        {OperationState.VALIDATED, OperationState.AWAITING_APPROVAL}
    )


def test_an_irreversible_write_always_needs_a_person() -> None:
    policy = OperationSpec(approval=Approval.POLICY)

    assert approval_for(policy, Risk.REVERSIBLE_WRITE) is Approval.POLICY
    assert approval_for(policy, Risk.IRREVERSIBLE_WRITE) is Approval.PERSON


def test_a_decision_must_quote_the_hash_of_the_exact_arguments() -> None:
    refusal = approval_refusal(
        view(),
        quoted_hash=arguments_hash({**ARGS, "draft_id": "DRAFT-2"}),
        decider="p",
        policy=STRICT,
        now=NOW,
    )

    assert refusal is DecisionRefusal.HASH_MISMATCH
    assert (
        approval_refusal(view(), quoted_hash=arguments_hash(ARGS), decider="p", policy=STRICT, now=NOW)
        is None
    )


@pytest.mark.parametrize(
    ("operation", "expected"),
    [
        (view(OperationState.APPROVED), DecisionRefusal.ALREADY_DECIDED),
        (view(OperationState.SUCCEEDED), DecisionRefusal.ALREADY_DECIDED),
        (view(OperationState.REJECTED), DecisionRefusal.ALREADY_DECIDED),
        (view(OperationState.EXPIRED), DecisionRefusal.EXPIRED),
        (view(expires_at=NOW), DecisionRefusal.EXPIRED),  # its deadline is now: too late
    ],
)
def test_a_decided_or_expired_operation_takes_no_decision(
    operation: OperationView, expected: DecisionRefusal
) -> None:
    quoted = arguments_hash(ARGS)

    assert approval_refusal(operation, quoted_hash=quoted, decider="p", policy=STRICT, now=NOW) is expected


def test_the_runs_own_principal_decides_only_the_risks_its_tenant_allows() -> None:
    quoted = arguments_hash(ARGS)
    reversible = view(subjects=frozenset({"me"}))
    irreversible = view(subjects=frozenset({"me"}), risk=Risk.IRREVERSIBLE_WRITE)
    lenient = TenantPolicy(self_approval=frozenset({Risk.REVERSIBLE_WRITE}))
    everything = TenantPolicy(self_approval=frozenset({Risk.REVERSIBLE_WRITE, Risk.IRREVERSIBLE_WRITE}))

    def refusal(
        operation: OperationView, policy: TenantPolicy, decider: str = "me"
    ) -> DecisionRefusal | None:
        return approval_refusal(operation, quoted_hash=quoted, decider=decider, policy=policy, now=NOW)

    # By default nobody decides the writes of a run they asked for, reversible or not.
    assert refusal(reversible, STRICT) is DecisionRefusal.SELF_APPROVAL
    assert refusal(irreversible, STRICT) is DecisionRefusal.SELF_APPROVAL
    assert refusal(reversible, STRICT, decider="someone else") is None
    # A tenant may let requesters decide their reversible writes and still not their irreversible ones.
    assert refusal(reversible, lenient) is None
    assert refusal(irreversible, lenient) is DecisionRefusal.SELF_APPROVAL
    assert refusal(irreversible, everything) is None
    # The hash is weighed before who decides: a self-approval of other arguments is a mismatch first.
    assert (
        approval_refusal(reversible, quoted_hash="0" * 64, decider="me", policy=STRICT, now=NOW)
        is DecisionRefusal.HASH_MISMATCH
    )


def test_only_an_unknown_outcome_can_be_resolved_and_only_quoting_its_hash() -> None:
    quoted = arguments_hash(ARGS)

    def refusal(operation: OperationView, quoted_hash: str = quoted) -> DecisionRefusal | None:
        return resolution_refusal(operation, quoted_hash=quoted_hash, decider="p", policy=STRICT)

    assert refusal(view(OperationState.UNKNOWN)) is None
    assert refusal(view(OperationState.UNKNOWN), "0" * 64) is DecisionRefusal.HASH_MISMATCH
    assert refusal(view(OperationState.EXECUTING)) is DecisionRefusal.NOT_UNKNOWN


def test_the_runs_own_principal_settles_an_unknown_outcome_only_where_it_may_approve() -> None:
    quoted = arguments_hash(ARGS)
    mine = view(OperationState.UNKNOWN, subjects=frozenset({"me"}))
    lenient = TenantPolicy(self_approval=frozenset({Risk.REVERSIBLE_WRITE}))

    def refusal(policy: TenantPolicy, decider: str = "me") -> DecisionRefusal | None:
        return resolution_refusal(mine, quoted_hash=quoted, decider=decider, policy=policy)

    assert refusal(STRICT) is DecisionRefusal.SELF_APPROVAL
    assert refusal(STRICT, decider="someone else") is None
    assert refusal(lenient) is None  # the same tenant policy as an approval's
    assert (
        resolution_refusal(mine, quoted_hash="0" * 64, decider="me", policy=STRICT)
        is DecisionRefusal.HASH_MISMATCH
    )


def test_an_approval_waits_the_runs_approval_budget_or_the_tools_shorter_window() -> None:
    budgets = Budgets(deadline_s=30, approval_wait_s=3600)

    assert approval_deadline(NOW, OperationSpec(), budgets) == NOW + timedelta(hours=1)
    assert approval_deadline(NOW, OperationSpec(approval_window_s=600), budgets) == NOW + timedelta(
        seconds=600
    )
    # A tool's longer window does not lengthen the run's; the run's own deadline bounds neither (it is parked).
    assert approval_deadline(NOW, OperationSpec(approval_window_s=7200), budgets) == NOW + timedelta(hours=1)


@pytest.mark.parametrize(
    ("error", "state"),
    [
        (None, OperationState.SUCCEEDED),
        (NodeError(kind=ErrorKind.BUSINESS, code="DRAFT_NOT_FOUND", message="m"), OperationState.FAILED),
        (NodeError(kind=ErrorKind.CONTRACT, code="INVALID_OUTPUT", message="m"), OperationState.FAILED),
        (NodeError(kind=ErrorKind.AUTHORIZATION, code="FORBIDDEN", message="m"), OperationState.FAILED),
        (NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message="m"), OperationState.UNKNOWN),
        (NodeError(kind=ErrorKind.TRANSIENT, code="CONNECTION_FAILED", message="m"), OperationState.UNKNOWN),
        (NodeError(kind=ErrorKind.PROTOCOL, code="MALFORMED_ANSWER", message="m"), OperationState.UNKNOWN),
        (NodeError(kind=ErrorKind.UNKNOWN_EFFECT, code="WORKER_FAILED", message="m"), OperationState.UNKNOWN),
    ],
)
def test_a_timeout_or_an_unreadable_answer_is_unknown_never_failed(
    error: NodeError | None, state: OperationState
) -> None:
    assert outcome_state(error) is state


def test_the_operation_id_reaches_the_tool_only_where_the_overlay_puts_it() -> None:
    keyed = OperationSpec(key=KeyCarrier.ARGUMENT, key_argument="idempotency_key")

    assert call_arguments(keyed, ARGS, "op-1") == {**ARGS, "idempotency_key": "op-1"}
    assert call_arguments(keyed, {**ARGS, "idempotency_key": "forged"}, "op-1")["idempotency_key"] == "op-1"
    assert call_arguments(OperationSpec(), ARGS, "op-1") == ARGS


def test_a_reconciling_read_takes_its_arguments_from_the_write_and_the_operation_id() -> None:
    assert reconcile_arguments(FIND, ARGS, "op-1") == {"case_id": "C-103", "key": "op-1"}
    assert reconcile_arguments(FIND, {"draft_id": "D"}, "op-1") is None  # a source the write does not have


@pytest.mark.parametrize(
    ("output", "seen"),
    [
        ({"found": True}, Existence.EXISTS),
        ({"found": False}, Existence.ABSENT),
        ({"found": "yes"}, Existence.UNCLEAR),
        ({}, Existence.UNCLEAR),
        (["found"], Existence.UNCLEAR),
        (None, Existence.UNCLEAR),
    ],
)
def test_only_a_boolean_says_whether_the_effect_exists(output: object, seen: Existence) -> None:
    assert existence(FIND, output) is seen


def test_an_absent_effect_is_a_failure_only_once_the_call_that_was_out_can_no_longer_land() -> None:
    started = NOW - timedelta(seconds=10)

    assert reconciled_state(Existence.EXISTS, executing_since=started, call_limit_s=60, now=NOW) is (
        OperationState.SUCCEEDED
    )
    assert reconciled_state(Existence.ABSENT, executing_since=started, call_limit_s=60, now=NOW) is None
    assert reconciled_state(Existence.ABSENT, executing_since=started, call_limit_s=5, now=NOW) is (
        OperationState.FAILED
    )
    assert reconciled_state(Existence.UNCLEAR, executing_since=started, call_limit_s=5, now=NOW) is None


def test_a_write_confirmed_by_a_read_ends_with_the_answer_the_read_holds() -> None:
    request = {"request_id": "REQ-1"}

    assert reconciled_output(FIND, {"found": True, "request": request}) == request
    assert reconciled_output(FIND, {"found": True}) == {"reconciled_by": "find", "evidence": {"found": True}}


def test_a_read_that_holds_what_the_write_sent_says_the_effect_exists() -> None:
    content = Reconcile(tool="read_text_file", arguments=(("path", "path"),), matches=("content", "content"))
    written = {"path": "/root/a.txt", "content": "hello"}

    assert existence(content, {"content": "hello"}, written) is Existence.EXISTS
    assert existence(content, {"content": "something else"}, written) is Existence.ABSENT
    assert existence(content, {"other": "hello"}, written) is Existence.UNCLEAR
    assert existence(content, {"content": "hello"}, {"path": "/root/a.txt"}) is Existence.UNCLEAR


def test_in_meta_the_operation_id_travels_beside_the_arguments_not_among_them() -> None:
    in_meta = OperationSpec(key=KeyCarrier.META)

    assert call_meta(in_meta, "op-1") == {META_KEY: "op-1"}
    assert call_arguments(in_meta, ARGS, "op-1") == ARGS
    assert call_meta(OperationSpec(key=KeyCarrier.ARGUMENT, key_argument="k"), "op-1") == {}

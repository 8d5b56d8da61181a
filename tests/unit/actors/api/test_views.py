"""A person's decision is answered with the operation as the decision left it, whatever its run did next."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from actors.api.views import as_json, decision_view
from actors.store.operations import Operation, Transition
from dag.contracts import Recording, Risk
from dag.operations import OperationState
from dag.writes import Approval

AT = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)


def approved_at(at: datetime) -> Operation:
    return Operation(
        operation_id="00000000-0000-4000-8000-000000000001",
        run_id="00000000-0000-4000-8000-000000000002",
        node_id="send",
        tenant_id="tenant-demo",
        subject="requester",
        resource={"case_id": "C-103"},
        tool="caseops_send_document_request",
        description="send",
        risk=Risk.IRREVERSIBLE_WRITE,
        approval=Approval.PERSON,
        recording=Recording.FULL,
        args={"case_id": "C-103"},
        args_hash="a" * 64,
        intent_hash="a" * 64,
        generation=1,
        state=OperationState.APPROVED,
        attempts=0,
        expires_at=None,
        executing_since=None,
        output=None,
        error=None,
        created_at=AT - timedelta(seconds=5),
        updated_at=at,
    )


def step(source: OperationState, target: OperationState, actor: str, at: datetime) -> Transition:
    return Transition(source, target, actor, None, at)


HISTORY = [
    step(
        OperationState.VALIDATED, OperationState.AWAITING_APPROVAL, "supervisor:s", AT - timedelta(seconds=2)
    ),
    step(OperationState.AWAITING_APPROVAL, OperationState.APPROVED, "person:tenant-demo/alice", AT),
]


def test_the_run_moving_the_operation_on_is_not_shown_as_the_decision() -> None:
    woken = [*HISTORY, step(OperationState.APPROVED, OperationState.EXECUTING, "supervisor:s", AT)]

    view = as_json(decision_view(approved_at(AT), woken, []))

    assert view["state"] == "approved"
    assert [(entry["to"], entry["actor"]) for entry in view["history"]] == [
        ("awaiting_approval", "supervisor:s"),
        ("approved", "person:tenant-demo/alice"),
    ]


def test_a_history_that_ends_at_the_decision_is_shown_whole() -> None:
    assert len(decision_view(approved_at(AT), HISTORY, []).history) == 2

"""Continuing a run that stopped: which runs may be continued, what the continuation carries over, and its budgets.

A continuation is a run of its own over the earlier run's tenant, principal, resource, stage, planner and
pinned tool definitions; only its goal, an answer and its budgets (within the limits) may be new. It carries
over, in its ``run_continued`` event, the reads that succeeded in the earlier runs of the chain (reused by
the fingerprint gate, never called again), the agent nodes whose child runs completed (their outcome reused,
no child run started again), those whose child runs did not (their child is continued in turn, not started
anew) and the writes it takes over by id (a succeeded one is never executed again, an unknown one is
reconciled first). The earlier run's record is not touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from dag.budget import BudgetRequest, Budgets
from dag.events import CarriedAnswer, CarriedChild, CarriedOperation, CarriedOutput
from dag.operations import OperationState
from dag.run_state import RunState
from dag.states import NodeStatus, RunStatus, StopReason

CONTINUABLE = frozenset({RunStatus.STOPPED, RunStatus.NEEDS_HUMAN})
"""A run that a limit, a refusal or a person's no ended may be continued once a person or time clears it. A
``completed`` run has its answer; a ``failed`` one ended on a defect (an invalid plan, the planner or the runtime
failing), which a continuation would meet again; a ``cancelled`` one was someone's decision to stop."""

CARRIED_OPERATION_STATES = frozenset(
    {OperationState.SUCCEEDED, OperationState.UNKNOWN, OperationState.EXECUTING}
)
"""The writes a continuation takes over by id: those that happened, or may have. One that was rejected,
expired or failed never executed; proposed again, it is a new operation that asks for its own yes."""


class ContinueRefusal(StrEnum):
    """Why a run cannot be continued (an unknown run, or another tenant's, is not found: one answer)."""

    NOT_FINISHED = "run-not-finished"
    NOT_CONTINUABLE = "run-not-continuable"


def continue_refusal(status: RunStatus) -> ContinueRefusal | None:
    """Whether a run that ended ``status`` may be continued."""
    if not status.terminal:
        return ContinueRefusal.NOT_FINISHED
    return None if status in CONTINUABLE else ContinueRefusal.NOT_CONTINUABLE


def carried_outputs(state: RunState, is_read: Callable[[str], bool]) -> tuple[CarriedOutput, ...]:
    """Every read that succeeded in ``state``'s run or in the runs it continues, and every agent node whose
    child run completed (its output names that child and holds its bounded result), once per fingerprint (the
    oldest): what a continuation of it reuses. ``is_read(tool)``: whether the tool only reads (a write's
    outcome is carried by its operation, not by its output)."""
    carried = dict(state.carried)
    for node_id in state.order:
        node = state.nodes[node_id]
        if (
            node.status is NodeStatus.SUCCEEDED
            and not node.is_group
            and node.fingerprint is not None
            and node.args is not None
            and node.fingerprint not in carried
            and (is_read(node.tool) or node.child_run_id is not None)
        ):
            carried[node.fingerprint] = CarriedOutput(
                fingerprint=node.fingerprint,
                tool=node.tool,
                args=dict(node.args),
                output=node.output,
                run_id=state.run_id,
                node_id=node_id,
            )
    return tuple(carried.values())


def unfinished_children(state: RunState) -> tuple[CarriedChild, ...]:
    """Every agent node of ``state``'s run, or of the runs it continues, whose child run did not complete, once
    per fingerprint (the newest: a child continued in a later run of the chain holds what the earlier one
    did, and more): a continuation's identical agent node continues that child rather than start a new one.
    Whether the child may be continued (it stopped; it failed, or was cancelled) is read when it is needed
    (``continues_child``): a child its parent's stop is stopping may not have ended yet."""
    children = dict(state.carried_children)
    for node_id in state.order:
        node = state.nodes[node_id]
        if (
            node.child_run_id is not None
            and node.fingerprint is not None
            and node.status is not NodeStatus.SUCCEEDED
        ):
            children[node.fingerprint] = CarriedChild(
                fingerprint=node.fingerprint,
                child_run_id=node.child_run_id,
                run_id=state.run_id,
                node_id=node_id,
            )
    return tuple(children.values())


def continues_child(status: RunStatus, *, continued: bool, pruned: bool) -> bool:
    """Whether an agent node's earlier child run, which ended ``status``, is continued by its continued parent's
    identical node (else a new child starts): it may be continued as any run may (``continue_refusal``), its
    history was kept, and no other run continues it already (a run has one continuation)."""
    return continue_refusal(status) is None and not continued and not pruned


@dataclass(frozen=True)
class Ledgered:
    """A write of the earlier run as the ledger holds it now."""

    tool: str
    args_hash: str
    operation_id: str
    state: OperationState


def carried_operations(writes: Iterable[Ledgered]) -> tuple[CarriedOperation, ...]:
    """Of the earlier runs' writes, those a continuation takes over by id (``CARRIED_OPERATION_STATES``)."""
    return tuple(
        CarriedOperation(tool=write.tool, args_hash=write.args_hash, operation_id=write.operation_id)
        for write in writes
        if write.state in CARRIED_OPERATION_STATES
    )


def continued_budgets(earlier: Budgets, limits: Budgets, requested: BudgetRequest | None) -> Budgets:
    """The continuation's budgets: the earlier run's, each lowered to today's limit, with ``requested`` ones
    applied (higher than before if the limits allow). Raises ``BudgetAboveLimit`` for a request above a limit."""
    limits.granted(requested)  # refuses what the limits do not allow, naming each
    current = {
        name: min(getattr(earlier, name), getattr(limits, name)) for name in type(earlier).model_fields
    }
    asked = requested.model_dump(exclude_none=True) if requested is not None else {}
    return Budgets.model_validate({**current, **asked})


def continued_answers(state: RunState, answer: str | None, by: str) -> tuple[CarriedAnswer, ...]:
    """What the continuation's planner is shown as people's answers: the earlier runs', and ``answer``, given
    by ``by`` to the question the earlier run stopped on (or to why it stopped)."""
    answers = [
        CarriedAnswer(question=item.question, answer=item.answer, by=item.by) for item in state.answers
    ]
    if answer is not None:
        answers.append(CarriedAnswer(question=stopped_on(state), answer=answer, by=by))
    return tuple(answers)


def stopped_on(state: RunState) -> str:
    """What the earlier run was waiting to know when it stopped, as a question an answer may be given to."""
    if state.stop_reason is StopReason.QUESTION_EXPIRED and state.expired_question is not None:
        return state.expired_question
    reason = state.stop_reason.value if state.stop_reason is not None else state.status.value
    return f"run {state.run_id} stopped ({reason}): {state.detail or 'no detail'}. How should it go on?"

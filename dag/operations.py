"""Operations: a write a run wants to make, as one business intent with a ledger row of its own.

A node whose tool writes (``Risk.REVERSIBLE_WRITE`` or ``IRREVERSIBLE_WRITE``) is not called like a read. It
becomes an **operation**: the business intent, not the run's attempt. Its key is the tenant, the tool and the
hash of the arguments that name the intent (all of them by default, ``dag.writes.Intent``), so the same write
proposed again — by another node, a replan, a recovery, or another run — is the same operation while it is
joinable (``joinable``); a run that proposes it later joins it, waits for the same decision, and reads its
outcome. It is approved by a policy or a person against the hash of its arguments, executed by one caller at
most (the one that moves it ``approved → executing``), and — when the call's outcome is unknown (a timeout, a
dropped connection, a dead caller) — reconciled with a read, never blindly retried.

This module holds the values and the decisions: the states and their legal transitions, the operator's
declaration (``OperationSpec``), how an outcome maps to a state, who may decide, and what a reconciling read
says. The store keeps the rows (``actors.store.operations``); the round drives them (``actors.run.operate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from dag.budget import Budgets
from dag.contracts import Risk
from dag.events import ErrorKind, NodeError
from dag.fingerprint import sha256_hex
from dag.policy import TenantPolicy
from dag.writes import META_KEY, OPERATION_ID_SOURCE, Approval, Intent, KeyCarrier, OperationSpec, Reconcile


class OperationState(StrEnum):
    PROPOSED = "proposed"
    VALIDATED = "validated"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    EXECUTING = "executing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    REJECTED = "rejected"
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_OPERATION_STATES

    @property
    def decided(self) -> bool:
        """Whether a person or the policy has already said yes or no (an approval arrives too late)."""
        return self not in (
            OperationState.PROPOSED,
            OperationState.VALIDATED,
            OperationState.AWAITING_APPROVAL,
        )


TERMINAL_OPERATION_STATES: Final = frozenset(
    {OperationState.SUCCEEDED, OperationState.FAILED, OperationState.REJECTED, OperationState.EXPIRED}
)

OPERATION_TRANSITIONS: Final[dict[OperationState, frozenset[OperationState]]] = {
    OperationState.PROPOSED: frozenset({OperationState.VALIDATED}),
    OperationState.VALIDATED: frozenset({OperationState.AWAITING_APPROVAL, OperationState.APPROVED}),
    OperationState.AWAITING_APPROVAL: frozenset(
        {OperationState.APPROVED, OperationState.REJECTED, OperationState.EXPIRED}
    ),
    OperationState.APPROVED: frozenset({OperationState.EXECUTING, OperationState.EXPIRED}),
    OperationState.EXECUTING: frozenset(
        {
            OperationState.SUCCEEDED,
            OperationState.FAILED,
            OperationState.UNKNOWN,
        }
    ),
    # An unknown outcome is settled by a reconciling read, a person's resolution, or the late answer of the
    # one call that was out (its caller outlived the supervisor that marked it unknown).
    OperationState.UNKNOWN: frozenset({OperationState.SUCCEEDED, OperationState.FAILED}),
    OperationState.SUCCEEDED: frozenset(),
    OperationState.FAILED: frozenset(),
    OperationState.REJECTED: frozenset(),
    OperationState.EXPIRED: frozenset(),
}


def sources_of(target: OperationState) -> frozenset[OperationState]:
    """Every state from which ``target`` may be reached: the guard of every conditional update of a row, so
    that no move the table forbids is ever made (``actors.store.operations.OperationStore.move``)."""
    return frozenset(source for source, targets in OPERATION_TRANSITIONS.items() if target in targets)


def approval_for(spec: OperationSpec, risk: Risk) -> Approval:
    """Who approves an operation of a tool of ``risk``: ``irreversible_write`` always needs a person, whatever
    the overlay says."""
    return Approval.PERSON if risk is Risk.IRREVERSIBLE_WRITE else spec.approval


# ---------------------------------------------------------------- identity


def arguments_hash(args: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the resolved arguments: what an approval quotes."""
    return sha256_hex(dict(args))


def intent_hash(intent: Intent, args: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the arguments that name the intent: all of them by default (then it is
    ``arguments_hash``), else those the overlay names (an argument left out is absent from the hash)."""
    if intent.arguments is None:
        return arguments_hash(args)
    return sha256_hex({name: args[name] for name in intent.arguments if name in args})


def joinable(state: OperationState, settled_at: datetime, intent: Intent, now: datetime) -> bool:
    """Whether a new proposal of an intent joins its operation in ``state`` (``settled_at``: when it last
    moved) rather than proposing the intent anew.

    An operation not settled yet is always joined: it waits for a person, executes, or may have acted
    (``unknown``), and a second one could act twice. A success is joined within the intent's window (forever
    by default): its outcome is read, the tool is not called again. A failure, a rejection or an expiry never
    acted: the intent may be proposed anew, and needs a decision of its own.
    """
    if not state.terminal:
        return True
    if state is not OperationState.SUCCEEDED:
        return False
    return intent.window_s is None or now - settled_at < timedelta(seconds=intent.window_s)


def call_meta(spec: OperationSpec, op_id: str) -> dict[str, Any]:
    """The ``_meta`` entries the tool is sent: the operation id, where the overlay puts it there."""
    return {META_KEY: op_id} if spec.key is KeyCarrier.META else {}


def call_arguments(spec: OperationSpec, args: Mapping[str, Any], op_id: str) -> dict[str, Any]:
    """The arguments the tool is sent: the node's, with the idempotency key where the overlay puts it."""
    sent = dict(args)
    if spec.key is KeyCarrier.ARGUMENT and spec.key_argument is not None:
        sent[spec.key_argument] = op_id
    return sent


# ---------------------------------------------------------------- decisions


APPROVE_SCOPE = "runs:approve"
"""The scope a person needs to approve, reject or resolve an operation."""


class DecisionRefusal(StrEnum):
    """Why a person's approval, rejection or resolution of an operation is refused (a problem type each)."""

    NOT_FOUND = "operation-not-found"
    HASH_MISMATCH = "operation-hash-mismatch"
    ALREADY_DECIDED = "operation-already-decided"
    EXPIRED = "operation-expired"
    SELF_APPROVAL = "operation-self-approval"
    NOT_UNKNOWN = "operation-not-unknown"


@dataclass(frozen=True)
class OperationView:
    """What a decision is weighed on: one operation as the ledger holds it."""

    operation_id: str
    state: OperationState
    args_hash: str
    risk: Risk
    subjects: frozenset[str]
    """The principals of every run that proposed or joined it: the requesters of the intent."""
    expires_at: datetime | None


def approval_refusal(
    operation: OperationView,
    *,
    quoted_hash: str,
    decider: str,
    policy: TenantPolicy,
    now: datetime,
) -> DecisionRefusal | None:
    """Why ``decider`` may not approve or reject ``operation`` quoting ``quoted_hash`` at ``now``, or ``None``.

    The hash is checked first: a decision about other arguments than the operation's is no decision about it.
    The principal of a run that shares it decides only the risks its tenant's ``policy`` lets it (by default
    none).
    """
    if quoted_hash != operation.args_hash:
        return DecisionRefusal.HASH_MISMATCH
    if operation.state is OperationState.EXPIRED or overdue(operation.state, operation.expires_at, now):
        return DecisionRefusal.EXPIRED
    if operation.state is not OperationState.AWAITING_APPROVAL:
        return DecisionRefusal.ALREADY_DECIDED
    if _self_decided(operation, decider, policy):
        return DecisionRefusal.SELF_APPROVAL
    return None


def resolution_refusal(
    operation: OperationView, *, quoted_hash: str, decider: str, policy: TenantPolicy
) -> DecisionRefusal | None:
    """Why ``decider`` may not settle ``operation``'s unknown outcome, or ``None``.

    Saying what a write did is a decision about it as much as approving it: the principal of a run that
    shares it settles only the risks its tenant's ``policy`` lets it approve.
    """
    if quoted_hash != operation.args_hash:
        return DecisionRefusal.HASH_MISMATCH
    if operation.state is not OperationState.UNKNOWN:
        return DecisionRefusal.NOT_UNKNOWN
    if _self_decided(operation, decider, policy):
        return DecisionRefusal.SELF_APPROVAL
    return None


def _self_decided(operation: OperationView, decider: str, policy: TenantPolicy) -> bool:
    """Separation of duties: the principal of any run that shares the operation (one intent, many requesters)
    decides only the risks its tenant lets it."""
    return decider in operation.subjects and operation.risk not in policy.self_approval


def overdue(state: OperationState, expires_at: datetime | None, now: datetime) -> bool:
    """Whether an operation still awaiting a person has passed its deadline: a yes now is too late, and
    whoever finds it so (its waiter, a run proposing its intent) expires it."""
    return state is OperationState.AWAITING_APPROVAL and expires_at is not None and now >= expires_at


def approval_deadline(now: datetime, spec: OperationSpec, budgets: Budgets) -> datetime:
    """When an operation waiting for a person expires: the run's ``approval_wait_s``, or the tool's own
    window where it declares a shorter one. The run's own deadline is not a bound: a run waiting for a
    person alone is parked, and its clock stands still."""
    window = budgets.approval_wait_s
    if spec.approval_window_s is not None:
        window = min(window, spec.approval_window_s)
    return now + timedelta(seconds=window)


_DEFINITE_KINDS: Final = frozenset({ErrorKind.CONTRACT, ErrorKind.AUTHORIZATION, ErrorKind.BUSINESS})
"""The tool answered, and its answer says it did not act: a definite failure."""


def outcome_state(error: NodeError | None) -> OperationState:
    """The state a call's outcome puts its operation in.

    An answer is ``succeeded``; a tool's own refusal (business, contract, authorization) is ``failed``; a
    timeout, a dropped connection, an answer that could not be read or a dead caller is ``unknown``: the tool
    may have acted, and only a reconciling read or a person can tell.
    """
    if error is None:
        return OperationState.SUCCEEDED
    if error.kind in _DEFINITE_KINDS:
        return OperationState.FAILED
    return OperationState.UNKNOWN


class Existence(StrEnum):
    EXISTS = "exists"
    ABSENT = "absent"
    UNCLEAR = "unclear"


def reconcile_arguments(reconcile: Reconcile, args: Mapping[str, Any], op_id: str) -> dict[str, Any] | None:
    """The reconciling read's arguments, from the operation's; ``None`` if one it needs is missing."""
    out: dict[str, Any] = {}
    for name, source in reconcile.arguments:
        if source == OPERATION_ID_SOURCE:
            out[name] = op_id
        elif source in args:
            out[name] = args[source]
        else:
            return None
    return out


def existence(reconcile: Reconcile, output: Any, args: Mapping[str, Any] | None = None) -> Existence:
    """What a reconciling read's ``output`` says of the effect of a write sent ``args``."""
    if not isinstance(output, Mapping):
        return Existence.UNCLEAR
    if reconcile.matches is not None:
        field, argument = reconcile.matches
        if args is None or argument not in args or field not in output:
            return Existence.UNCLEAR
        return Existence.EXISTS if output[field] == args[argument] else Existence.ABSENT
    value = output.get(reconcile.exists) if reconcile.exists is not None else None
    if value is True:
        return Existence.EXISTS
    if value is False:
        return Existence.ABSENT
    return Existence.UNCLEAR


def reconciled_output(reconcile: Reconcile, output: Any) -> Any:
    """What a write confirmed by the reconciling read's ``output`` ends with: the write's own answer where the
    read holds it (``Reconcile.output``), else the read's evidence, named as such."""
    if (
        reconcile.output is not None
        and isinstance(output, Mapping)
        and output.get(reconcile.output) is not None
    ):
        return output[reconcile.output]
    return {"reconciled_by": reconcile.tool, "evidence": output}


def reconciled_state(
    seen: Existence, *, executing_since: datetime | None, call_limit_s: float, now: datetime
) -> OperationState | None:
    """The state a reconciling read settles an unknown operation in, or ``None`` (still unknown).

    An effect that exists is ``succeeded``. An absent one is ``failed`` only once the call that was out can no
    longer land (its caller gives up after ``call_limit_s``): before then, a slow call may still commit.
    """
    if seen is Existence.EXISTS:
        return OperationState.SUCCEEDED
    if seen is Existence.ABSENT and not may_still_land(executing_since, call_limit_s=call_limit_s, now=now):
        return OperationState.FAILED
    return None


def may_still_land(executing_since: datetime | None, *, call_limit_s: float, now: datetime) -> bool:
    """Whether the call out since ``executing_since`` may still reach the tool and answer: its caller gives up
    after ``call_limit_s``. Until then an executing operation is its caller's, wherever that caller is (another
    supervisor, another run sharing the intent); after, nobody will record its outcome, and it is ``unknown``."""
    return executing_since is not None and now < executing_since + timedelta(seconds=call_limit_s)


NOT_DONE: Final = "WRITE_NOT_DONE"
"""The code of a write that a reconciling read found never happened: a definite failure, not a lost answer."""


def not_done_error(detail: str) -> NodeError:
    return NodeError(kind=ErrorKind.BUSINESS, code=NOT_DONE, message=detail)

"""The action-fingerprint gate: an identical action runs once per run (and a read once per chain of continued
runs), and only so often may it be proposed."""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from dag.errors import BudgetExceeded
from dag.run_state import RunState


@dataclass(frozen=True)
class Dispatch:
    """A new action: execute it."""


@dataclass(frozen=True)
class Reuse:
    """The identical action already produced an output in this run: use it, execute nothing."""

    source_node_id: str


@dataclass(frozen=True)
class ReuseCarried:
    """The identical read succeeded in an earlier run this one continues: use its output, execute nothing."""

    source_run_id: str
    source_node_id: str


@dataclass(frozen=True)
class Wait:
    """The identical action is in flight: decide again when it lands."""


@dataclass(frozen=True)
class AlreadyFailed:
    """The identical action ran in this run and the tool refused it; running it again would repeat the refusal.
    (An identical action that failed for an infrastructure reason is dispatched again.)"""

    source_node_id: str


@dataclass(frozen=True)
class RepeatLimit:
    """The action has been proposed more often than ``repeat_limit`` allows: the run must stop."""

    proposals: int
    limit: int


GateDecision = Dispatch | Reuse | ReuseCarried | Wait | AlreadyFailed | RepeatLimit


def gate(
    state: RunState, fingerprint: str, *, dispatching: Set[str], decided: Mapping[str, int]
) -> GateDecision:
    """Decide an authorized node's action.

    ``dispatching`` holds the fingerprints dispatched earlier in this same step and ``decided`` how many
    proposals of each fingerprint this step has decided so far: neither is in ``state`` yet.
    """
    source_id = state.fingerprints.get(fingerprint)
    if source_id is None and fingerprint in dispatching:
        return Wait()
    if source_id is not None and not state.nodes[source_id].status.terminal:
        return Wait()
    proposals = state.proposals.get(fingerprint, 0) + decided.get(fingerprint, 0) + 1
    try:
        state.budgets.check_repeat(proposals=proposals)
    except BudgetExceeded:
        return RepeatLimit(proposals, state.budgets.repeat_limit)
    if source_id is None:
        carried = state.carried.get(fingerprint)
        return Dispatch() if carried is None else ReuseCarried(carried.run_id, carried.node_id)
    source = state.nodes[source_id]
    if source.status.has_output:
        return Reuse(source_id)
    if source.error is not None and source.error.infrastructure:
        return Dispatch()  # it never got an answer: asking again is not repeating a failure
    return AlreadyFailed(source_id)

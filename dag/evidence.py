"""Failure is not evidence: which calls of a run never produced an answer, so that nothing rests on them.

A node that failed for an infrastructure reason (its worker died, the connection dropped, the tool's
database was down, the call timed out, the server broke the protocol) says nothing about the data. A joiner
that read it as "no such document" would state something untrue, so the runtime refuses to end such a run
``completed`` or with a planner's verdict: the run stops with ``EVIDENCE_INCOMPLETE`` and names the nodes.

Calls still in flight when a hard limit (the deadline, a budget) cut the round short are not failures: as
documented for budgets, the joiner is asked once with what the run has, and sees those calls as unfinished.
"""

from __future__ import annotations

from dataclasses import dataclass

from dag.run_state import RunState
from dag.states import NodeStatus


@dataclass(frozen=True)
class MissingEvidence:
    """A call whose answer the run never learned."""

    node_id: str
    tool: str
    code: str
    """Why: the error code of its last attempt."""

    def describe(self) -> str:
        return f"{self.node_id} ({self.tool}: {self.code})"


SERVER_UNREACHABLE_RULE = "toolset.server_unreachable"
DEFINITION_CHANGED_RULE = "toolset.definition_changed"
UNAVAILABLE_RULES = frozenset({SERVER_UNREACHABLE_RULE, DEFINITION_CHANGED_RULE})
"""Denials that say a tool could not be asked — its server not listed, or no longer listing the definition
the run pinned — not that the policy refused the action: like a failed call, they answer nothing."""

NOT_RUN = "NOT_RUN"
"""The code of a node a drained round left unfinished: the runtime must never do so, and if it did, what the
node would have said is unknown."""


def missing_evidence(state: RunState, *, drained: bool = False) -> tuple[MissingEvidence, ...]:
    """The run's calls that failed without an answer (an infrastructure reason), in run order. An identical
    action that did produce an output elsewhere in the run covers for a failed one.

    ``drained``: the round ended because nothing more could run (no hard limit cut it short), so a node that
    is not finished is missing too (``NOT_RUN``) — a safety net: the round loop never drains around one."""
    answered = {
        node.fingerprint
        for node in state.nodes.values()
        if node.status.has_output and node.fingerprint is not None
    }
    missing = []
    for node_id in state.order:
        node = state.nodes[node_id]
        if drained and not node.status.terminal:
            missing.append(MissingEvidence(node_id, node.tool, NOT_RUN))
            continue
        if node.is_group or node.fingerprint in answered:
            continue
        error, decision = node.error, node.decision
        if node.status is NodeStatus.FAILED and error is not None:
            if error.infrastructure or error.code in UNAVAILABLE_RULES:
                missing.append(MissingEvidence(node_id, node.tool, error.code))
        elif (
            node.status is NodeStatus.DENIED
            and decision is not None
            and decision.rule_id in UNAVAILABLE_RULES
        ):
            missing.append(MissingEvidence(node_id, node.tool, decision.rule_id))
    return tuple(missing)


def describe_missing(missing: tuple[MissingEvidence, ...], *, limit: int = 20) -> str:
    """``"evidence is incomplete: 3 calls have no answer: resolve[0] (…), …"``, for a stop's detail."""
    shown = ", ".join(item.describe() for item in missing[:limit])
    more = f" and {len(missing) - limit} more" if len(missing) > limit else ""
    noun = "call has" if len(missing) == 1 else "calls have"
    return f"evidence is incomplete: {len(missing)} {noun} no answer: {shown}{more}"

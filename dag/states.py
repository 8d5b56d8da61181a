"""Run and node states, their legal transitions, and the reasons a run can stop."""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from dag.errors import IllegalTransition


class RunStatus(StrEnum):
    PENDING = "pending"
    PLANNING = "planning"
    RUNNING = "running"
    WAITING = "waiting"
    """Waiting for a person: a write's approval or the resolution of its unknown outcome (other branches go
    on), a plan's review, or the answer to the planner's question."""
    JOINING = "joining"
    COMPLETED = "completed"
    NEEDS_HUMAN = "needs_human"
    STOPPED = "stopped"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_RUN_STATUSES


TERMINAL_RUN_STATUSES: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.NEEDS_HUMAN, RunStatus.STOPPED, RunStatus.FAILED, RunStatus.CANCELLED}
)

_ENDINGS: Final = frozenset({RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.STOPPED})

RUN_TRANSITIONS: Final[dict[RunStatus, frozenset[RunStatus]]] = {
    RunStatus.PENDING: frozenset({RunStatus.PLANNING}) | _ENDINGS,
    RunStatus.PLANNING: frozenset({RunStatus.RUNNING, RunStatus.NEEDS_HUMAN, RunStatus.WAITING}) | _ENDINGS,
    RunStatus.RUNNING: frozenset({RunStatus.JOINING, RunStatus.WAITING}) | _ENDINGS,
    RunStatus.WAITING: frozenset({RunStatus.RUNNING, RunStatus.JOINING, RunStatus.PLANNING}) | _ENDINGS,
    RunStatus.JOINING: frozenset({RunStatus.COMPLETED, RunStatus.NEEDS_HUMAN, RunStatus.PLANNING}) | _ENDINGS,
    RunStatus.COMPLETED: frozenset(),
    RunStatus.NEEDS_HUMAN: frozenset(),
    RunStatus.STOPPED: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}


class NodeStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    RETRYING = "retrying"
    SUCCEEDED = "succeeded"
    REUSED = "reused"
    FAILED = "failed"
    DENIED = "denied"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_NODE_STATUSES

    @property
    def has_output(self) -> bool:
        """Whether dependents may consume this node's output."""
        return self in (NodeStatus.SUCCEEDED, NodeStatus.REUSED)


TERMINAL_NODE_STATUSES: Final = frozenset(
    {
        NodeStatus.SUCCEEDED,
        NodeStatus.REUSED,
        NodeStatus.FAILED,
        NodeStatus.DENIED,
        NodeStatus.SKIPPED,
        NodeStatus.CANCELLED,
    }
)

NODE_TRANSITIONS: Final[dict[NodeStatus, frozenset[NodeStatus]]] = {
    NodeStatus.PENDING: frozenset(
        {
            NodeStatus.RUNNING,
            NodeStatus.REUSED,
            NodeStatus.FAILED,
            NodeStatus.DENIED,
            NodeStatus.SKIPPED,
            NodeStatus.CANCELLED,
        }
    ),
    NodeStatus.RUNNING: frozenset(
        {NodeStatus.SUCCEEDED, NodeStatus.FAILED, NodeStatus.RETRYING, NodeStatus.CANCELLED}
    ),
    NodeStatus.RETRYING: frozenset({NodeStatus.RUNNING, NodeStatus.FAILED, NodeStatus.CANCELLED}),
    NodeStatus.SUCCEEDED: frozenset(),
    NodeStatus.REUSED: frozenset(),
    NodeStatus.FAILED: frozenset(),
    NodeStatus.DENIED: frozenset(),
    NodeStatus.SKIPPED: frozenset(),
    NodeStatus.CANCELLED: frozenset(),
}


def check_run_transition(source: RunStatus, target: RunStatus) -> None:
    if target not in RUN_TRANSITIONS[source]:
        raise IllegalTransition("run", source.value, target.value)


def check_node_transition(source: NodeStatus, target: NodeStatus) -> None:
    if target not in NODE_TRANSITIONS[source]:
        raise IllegalTransition("node", source.value, target.value)


class StopReason(StrEnum):
    """Why a run ended anywhere but ``completed``. docs/API.md (Stop reasons) lists each with its meaning."""

    PLAN_INVALID = "PLAN_INVALID"
    PLANNER_ERROR = "PLANNER_ERROR"
    NODE_BUDGET_EXHAUSTED = "NODE_BUDGET_EXHAUSTED"
    FANOUT_LIMIT = "FANOUT_LIMIT"
    REPLAN_LIMIT = "REPLAN_LIMIT"
    STEP_LIMIT = "STEP_LIMIT"
    """A loop agent's model took its ``max_steps`` steps and still asked for another: it gave no final answer."""
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    REPEATED_ACTION_FINGERPRINT = "REPEATED_ACTION_FINGERPRINT"
    NO_NEW_EVIDENCE = "NO_NEW_EVIDENCE"
    INSUFFICIENT_EVIDENCE = "INSUFFICIENT_EVIDENCE"
    EVIDENCE_INCOMPLETE = "EVIDENCE_INCOMPLETE"
    """Calls failed without an answer (infrastructure, not data): no verdict may rest on the evidence."""
    UNRESOLVED_SOURCE_DOCUMENTS = "UNRESOLVED_SOURCE_DOCUMENTS"
    FINAL_ANSWER_UNSUPPORTED = "FINAL_ANSWER_UNSUPPORTED"
    TOKEN_BUDGET_EXHAUSTED = "TOKEN_BUDGET_EXHAUSTED"
    COST_BUDGET_EXHAUSTED = "COST_BUDGET_EXHAUSTED"
    PLANNER_CONTRACT_VIOLATION = "PLANNER_CONTRACT_VIOLATION"
    MODEL_REFUSED = "MODEL_REFUSED"
    CANCELLED = "CANCELLED"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    TOOL_SERVER_UNREACHABLE = "TOOL_SERVER_UNREACHABLE"
    """The plan needs a tool whose toolset server could not be listed: nothing of it was called."""
    TOOL_DEFINITION_CHANGED = "TOOL_DEFINITION_CHANGED"
    """A server now lists another definition of a tool than the one raydag pinned: its nodes are denied."""
    OPERATION_REJECTED = "OPERATION_REJECTED"
    """A person rejected a write the run needed: it never executed."""
    OPERATION_FAILED = "OPERATION_FAILED"
    """A write the run needed failed, or nobody could confirm it happened: see its operation."""
    APPROVAL_EXPIRED = "APPROVAL_EXPIRED"
    """A write waited for a person's approval past its deadline: it expired, unexecuted, and the run stopped."""
    PLAN_REJECTED = "PLAN_REJECTED"
    """A person reviewing the run's plan said no: nothing of that plan ran."""
    REVIEW_EXPIRED = "REVIEW_EXPIRED"
    """The run's plan waited for its review past its deadline: nothing of that plan ran."""
    QUESTION_LIMIT = "QUESTION_LIMIT"
    """The planner asked a person more questions than ``max_questions`` allows."""
    QUESTION_EXPIRED = "QUESTION_EXPIRED"
    """The planner's question waited for a person's answer past its deadline."""
    RESOLUTION_EXPIRED = "RESOLUTION_EXPIRED"
    """A write whose outcome nothing could tell waited for a person to resolve it past its deadline: it stays
    ``unknown`` (a person may still resolve it), and the run stopped."""

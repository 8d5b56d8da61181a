"""The error hierarchy: one root, subclasses that carry data and say who must act."""

from __future__ import annotations

from enum import StrEnum


class RaydagError(Exception):
    """Root of every error raydag raises on purpose."""


class PlanErrorCode(StrEnum):
    """Why a proposed plan was rejected before anything ran. The proposer must fix the plan."""

    MALFORMED_PLAN = "MALFORMED_PLAN"
    EMPTY_PLAN = "EMPTY_PLAN"
    TOO_MANY_NODES = "TOO_MANY_NODES"
    INVALID_NODE_ID = "INVALID_NODE_ID"
    DUPLICATE_NODE_ID = "DUPLICATE_NODE_ID"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    MALFORMED_REFERENCE = "MALFORMED_REFERENCE"
    SELF_REFERENCE = "SELF_REFERENCE"
    FORWARD_REFERENCE = "FORWARD_REFERENCE"
    UNKNOWN_REFERENCE = "UNKNOWN_REFERENCE"
    INVALID_POINTER = "INVALID_POINTER"
    ITEM_OUTSIDE_FOR_EACH = "ITEM_OUTSIDE_FOR_EACH"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    FORBIDDEN_ARGUMENT = "FORBIDDEN_ARGUMENT"
    AGENT_NODES_UNAVAILABLE = "AGENT_NODES_UNAVAILABLE"
    """An agent node where none may run (this runtime does not execute them yet)."""
    AGENT_TOO_DEEP = "AGENT_TOO_DEEP"


class PlanInvalid(RaydagError):
    """A plan failed validation; nothing of it ran."""

    def __init__(
        self,
        code: PlanErrorCode,
        message: str,
        *,
        node_id: str | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.node_id = node_id
        self.location = location

    def as_dict(self) -> dict[str, str | None]:
        return {
            "code": self.code.value,
            "message": self.message,
            "node_id": self.node_id,
            "location": self.location,
        }


class ReferenceUnresolved(RaydagError):
    """A reference named part of an output that does not exist (found at run time)."""

    def __init__(self, node_id: str | None, pointer: str, reason: str) -> None:
        target = f"output of {node_id!r}" if node_id is not None else "the for_each item"
        super().__init__(f"pointer {pointer!r} does not resolve in {target}: {reason}")
        self.node_id = node_id
        self.pointer = pointer


class IllegalTransition(RaydagError):
    """A state change the transition table forbids: a bug in the caller, never input to recover from."""

    def __init__(self, entity: str, source: str, target: str) -> None:
        super().__init__(f"illegal {entity} transition {source} -> {target}")
        self.entity = entity
        self.source = source
        self.target = target


class BudgetExceeded(RaydagError):
    """A hard limit was reached; the run stops with the budget's stop reason."""

    def __init__(self, budget: str, used: float, limit: float) -> None:
        super().__init__(f"budget {budget} exhausted: {used} > {limit}")
        self.budget = budget
        self.used = used
        self.limit = limit


class EventRefused(RaydagError, ValueError):
    """An event the run's state cannot take: out of order, or contradicting what was recorded. Like
    ``IllegalTransition``, a bug in whoever wrote the event, never input to recover from. (A ``ValueError``
    too, as the reducer's refusals were before they had a type of their own.)"""

    def __init__(self, kind: str | None, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        """The refused event's kind (``None``: no event at all, an empty log)."""
        self.reason = reason

"""A declared tool that may not be called now, and why: its server cannot be listed, or it lists another
definition than the one a run pinned. A value the run's logic reads (``actors.calls.live_catalogue`` keeps
them current)."""

from __future__ import annotations

from dataclasses import dataclass

from dag.evidence import DEFINITION_CHANGED_RULE, SERVER_UNREACHABLE_RULE
from dag.policy import Decision
from dag.states import StopReason

__all__ = ["DEFINITION_CHANGED_RULE", "SERVER_UNREACHABLE_RULE", "Withdrawal"]


@dataclass(frozen=True)
class Withdrawal:
    """Why a declared tool may not be called now: the policy rule a node of it is denied by, and the stop
    reason of the run that needed it."""

    rule_id: str
    stop_reason: StopReason
    detail: str

    @property
    def decision(self) -> Decision:
        """The denial a node of the withdrawn tool is recorded with."""
        return Decision(allowed=False, rule_id=self.rule_id, reason=self.detail)

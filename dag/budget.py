"""Budgets: hard limits on a run, as values; the budget decides when a run must stop."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dag.errors import BudgetExceeded
from dag.states import StopReason


class Budgets(BaseModel):
    """Hard limits of one run. A request may lower a limit, never raise it above the server's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_nodes: int = Field(default=64, ge=1, le=10_000)
    max_fanout: int = Field(default=32, ge=0, le=10_000)

    def lowered_by(self, requested: Budgets | None) -> Budgets:
        """These limits, each lowered to ``requested``'s where that is smaller."""
        if requested is None:
            return self
        return Budgets(
            max_nodes=min(self.max_nodes, requested.max_nodes),
            max_fanout=min(self.max_fanout, requested.max_fanout),
        )

    def check_expansion(self, *, executable_nodes: int, fanout: int) -> None:
        """Raise ``BudgetExceeded`` if a ``for_each`` of ``fanout`` items may not be added to the run."""
        if fanout > self.max_fanout:
            raise BudgetExceeded("max_fanout", fanout, self.max_fanout)
        if executable_nodes + fanout > self.max_nodes:
            raise BudgetExceeded("max_nodes", executable_nodes + fanout, self.max_nodes)


STOP_REASON_OF_BUDGET: dict[str, StopReason] = {
    "max_nodes": StopReason.NODE_BUDGET_EXHAUSTED,
    "max_fanout": StopReason.FANOUT_LIMIT,
}

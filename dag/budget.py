"""Budgets: hard limits on a run, as values; the budget decides when a run must stop."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from dag.errors import BudgetExceeded, RaydagError
from dag.states import StopReason

NODES_CAP = 10_000
"""The most nodes a run may ever hold: the ceiling of ``max_nodes`` (and of ``max_fanout``: a fan-out wider
than any run is none), and the bound a replan's plan is validated against before ``check_plan_size`` weighs
it against the run's own ``max_nodes``."""


class Budgets(BaseModel):
    """Hard limits of one run. Per-tool timeouts and attempts come from each tool's contract."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_nodes: int = Field(
        default=64,
        ge=1,
        le=NODES_CAP,
        description="Nodes in the run, all rounds, for_each parents and children.",
    )
    max_fanout: int = Field(default=32, ge=0, le=NODES_CAP, description="Children of one for_each.")
    max_replans: int = Field(default=2, ge=0, le=20, description="Plan rounds after the first.")
    max_parallel: int = Field(
        default=16, ge=1, le=1_000, description="Tool calls in flight at once in one run."
    )
    deadline_s: float = Field(
        default=120.0, gt=0, le=3_600, description="Wall-clock seconds from the run's start."
    )
    repeat_limit: int = Field(
        default=3, ge=1, le=100, description="How often one action (fingerprint) may be proposed in a run."
    )
    max_stale_replans: int = Field(
        default=1, ge=0, le=20, description="Replan rounds that may add no new evidence before the run stops."
    )
    max_tokens: int = Field(
        default=200_000, ge=0, le=10_000_000, description="Model input and output tokens over the whole run."
    )
    max_cost_usd: float = Field(
        default=5.0, ge=0, le=1_000, description="Model cost over the whole run, in USD."
    )
    max_questions: int = Field(
        default=3, ge=0, le=20, description="Questions the planner may ask a person over the whole run."
    )

    def lowered_by(self, requested: BudgetRequest | None) -> Budgets:
        """These limits with the requested ones applied; raises ``BudgetAboveLimit`` if a request exceeds one."""
        if requested is None:
            return self
        asked = requested.model_dump(exclude_none=True)
        above = {
            name: (value, getattr(self, name)) for name, value in asked.items() if value > getattr(self, name)
        }
        if above:
            raise BudgetAboveLimit(above)
        return self.model_copy(update=asked)

    def deadline_of(self, started: datetime) -> datetime:
        """When a run started at ``started`` must stop."""
        return started + timedelta(seconds=self.deadline_s)

    def check_deadline(self, *, started: datetime, now: datetime) -> None:
        """Raise ``BudgetExceeded`` once the run started at ``started`` has reached its deadline."""
        if now >= self.deadline_of(started):
            raise BudgetExceeded("deadline_s", round((now - started).total_seconds(), 3), self.deadline_s)

    def calls_room(self, *, in_flight: int) -> int:
        """How many more calls may start while ``in_flight`` are out (``max_parallel`` bounds them)."""
        return self.max_parallel - in_flight

    def nodes_left(self, *, nodes: int) -> int:
        """How many more nodes a run of ``nodes`` may gain."""
        return self.max_nodes - nodes

    def check_expansion(self, *, nodes: int, fanout: int) -> None:
        """Raise ``BudgetExceeded`` if a ``for_each`` of ``fanout`` items may not be added to a run of ``nodes``."""
        if fanout > self.max_fanout:
            raise BudgetExceeded("max_fanout", fanout, self.max_fanout)
        if nodes + fanout > self.max_nodes:
            raise BudgetExceeded("max_nodes", nodes + fanout, self.max_nodes)

    def check_plan_size(self, *, nodes: int, added: int) -> None:
        """Raise ``BudgetExceeded`` if a replan of ``added`` nodes may not join a run of ``nodes``."""
        if nodes + added > self.max_nodes:
            raise BudgetExceeded("max_nodes", nodes + added, self.max_nodes)

    def check_replan(self, *, replans: int) -> None:
        """``replans`` is the number of rounds after the first, counting the one about to start."""
        if replans > self.max_replans:
            raise BudgetExceeded("max_replans", replans, self.max_replans)

    def check_stale(self, *, stale_replans: int) -> None:
        """Raise ``BudgetExceeded`` if more replan rounds than allowed added no new evidence."""
        if stale_replans > self.max_stale_replans:
            raise BudgetExceeded("max_stale_replans", stale_replans, self.max_stale_replans)

    def check_usage(self, *, tokens: int, cost_usd: float) -> None:
        """Raise ``BudgetExceeded`` once model calls have used the token or the cost budget up."""
        if tokens > self.max_tokens:
            raise BudgetExceeded("max_tokens", tokens, self.max_tokens)
        if cost_usd > self.max_cost_usd:
            raise BudgetExceeded("max_cost_usd", round(cost_usd, 6), self.max_cost_usd)

    def check_repeat(self, *, proposals: int) -> None:
        """Raise ``BudgetExceeded`` if one action has been proposed ``proposals`` times, more than allowed."""
        if proposals > self.repeat_limit:
            raise BudgetExceeded("repeat_limit", proposals, self.repeat_limit)

    def check_questions(self, *, asked: int) -> None:
        """Raise ``BudgetExceeded`` if the planner has asked ``asked`` questions, more than allowed."""
        if asked > self.max_questions:
            raise BudgetExceeded("max_questions", asked, self.max_questions)


class BudgetRequest(BaseModel):
    """Budgets a request asks for: each may only lower the server's limit."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    max_nodes: int | None = Field(default=None, ge=1)
    max_fanout: int | None = Field(default=None, ge=0)
    max_replans: int | None = Field(default=None, ge=0)
    max_parallel: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=None, gt=0)
    repeat_limit: int | None = Field(default=None, ge=1)
    max_stale_replans: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)
    max_cost_usd: float | None = Field(default=None, ge=0)
    max_questions: int | None = Field(default=None, ge=0)


class BudgetAboveLimit(RaydagError):
    """A request asked for more than the server allows. The requester must lower it."""

    def __init__(self, above: dict[str, tuple[float, float]]) -> None:
        detail = ", ".join(f"{name} {asked} > {limit}" for name, (asked, limit) in sorted(above.items()))
        super().__init__(f"requested budgets exceed the server's limits: {detail}")
        self.above = above


STOP_REASON_OF_BUDGET: dict[str, StopReason] = {
    "max_nodes": StopReason.NODE_BUDGET_EXHAUSTED,
    "max_fanout": StopReason.FANOUT_LIMIT,
    "max_replans": StopReason.REPLAN_LIMIT,
    "deadline_s": StopReason.DEADLINE_EXCEEDED,
    "repeat_limit": StopReason.REPEATED_ACTION_FINGERPRINT,
    "max_stale_replans": StopReason.NO_NEW_EVIDENCE,
    "max_tokens": StopReason.TOKEN_BUDGET_EXHAUSTED,
    "max_cost_usd": StopReason.COST_BUDGET_EXHAUSTED,
    "max_questions": StopReason.QUESTION_LIMIT,
}

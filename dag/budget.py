"""Budgets: hard limits on a run, as values; the budget decides when a run must stop."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from dag.errors import BudgetExceeded, RaydagError
from dag.states import StopReason

NODES_CAP = 10_000
"""The most nodes a run may ever hold: the ceiling of ``max_nodes`` (and of ``max_fanout``: a fan-out wider
than any run is none), and the bound a replan's plan is validated against before ``check_plan_size`` weighs
it against the run's own ``max_nodes``."""
DAY_S = 86_400.0
WAIT_CAP_S = 30 * DAY_S
"""The longest any wait for a person may be allowed to last: the ceiling of every ``*_wait_s``."""
DEADLINE_CAP_S = DAY_S
"""The most wall-clock seconds of its own work any run may be allowed (``deadline_s``)."""


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
        default=120.0,
        gt=0,
        le=DEADLINE_CAP_S,
        description="Wall-clock seconds of the run's own work, from its start: the time it spends parked, "
        "waiting for people and nothing else, does not count.",
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
    approval_wait_s: float = Field(
        default=DAY_S, gt=0, le=WAIT_CAP_S, description="How long a write waits for a person's approval."
    )
    review_wait_s: float = Field(
        default=DAY_S, gt=0, le=WAIT_CAP_S, description="How long a plan waits for a person's review."
    )
    question_wait_s: float = Field(
        default=DAY_S, gt=0, le=WAIT_CAP_S, description="How long the planner's question waits for an answer."
    )
    resolution_wait_s: float = Field(
        default=7 * DAY_S,
        gt=0,
        le=WAIT_CAP_S,
        description="How long a write whose outcome nothing can tell waits for a person to resolve it.",
    )

    def granted(self, requested: BudgetRequest | None, *, defaults: Budgets | None = None) -> Budgets:
        """A run's budgets under these limits: each one ``requested``, else the ``defaults``' (these limits
        themselves when there are none), never above a limit. Raises ``BudgetAboveLimit`` naming every
        requested budget above its limit."""
        asked = requested.model_dump(exclude_none=True) if requested is not None else {}
        above = {
            name: (value, getattr(self, name)) for name, value in asked.items() if value > getattr(self, name)
        }
        if above:
            raise BudgetAboveLimit(above)
        if defaults is None:
            return self.model_copy(update=asked)
        capped = {name: min(getattr(defaults, name), getattr(self, name)) for name in type(self).model_fields}
        return self.model_copy(update={**capped, **asked})

    def deadline_of(self, started: datetime) -> datetime:
        """When a run started at ``started`` must stop, if it is never parked."""
        return started + timedelta(seconds=self.deadline_s)

    def check_deadline(self, *, active_s: float) -> None:
        """Raise ``BudgetExceeded`` once the run's own work has taken ``active_s`` seconds, its deadline."""
        if active_s >= self.deadline_s:
            raise BudgetExceeded("deadline_s", round(active_s, 3), self.deadline_s)

    def wait_s(self, kind: WaitKind) -> float:
        """How long a wait of ``kind`` for a person may last."""
        return float(getattr(self, f"{kind.value}_wait_s"))

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

    def check_before_request(self, *, tokens: int, cost_usd: float, request: RequestBound) -> None:
        """Raise ``BudgetExceeded`` if a model request that may take up to ``request`` would take a run that has
        used ``tokens`` and ``cost_usd`` past its token or cost budget: what the run may not risk."""
        if tokens + request.tokens > self.max_tokens:
            raise BudgetExceeded("max_tokens", tokens + request.tokens, self.max_tokens)
        if cost_usd + request.cost_usd > self.max_cost_usd:
            raise BudgetExceeded("max_cost_usd", round(cost_usd + request.cost_usd, 6), self.max_cost_usd)

    def check_repeat(self, *, proposals: int) -> None:
        """Raise ``BudgetExceeded`` if one action has been proposed ``proposals`` times, more than allowed."""
        if proposals > self.repeat_limit:
            raise BudgetExceeded("repeat_limit", proposals, self.repeat_limit)

    def check_questions(self, *, asked: int) -> None:
        """Raise ``BudgetExceeded`` if the planner has asked ``asked`` questions, more than allowed."""
        if asked > self.max_questions:
            raise BudgetExceeded("max_questions", asked, self.max_questions)


@dataclass(frozen=True)
class RequestBound:
    """The most one model request may take, known before it is made: its input tokens (an upper bound from
    what it sends), the most its answer may take (``max_output_tokens``), and their cost at the model's price."""

    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def describe(self) -> str:
        """``8854 tokens (4758 in, 4096 out) and $0.0084568 at gpt-4.1-mini's price``."""
        return (
            f"{self.tokens} tokens ({self.input_tokens} in, {self.output_tokens} out) and "
            f"${self.cost_usd:g} at {self.model}'s price"
        )


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
    approval_wait_s: float | None = Field(default=None, gt=0)
    review_wait_s: float | None = Field(default=None, gt=0)
    question_wait_s: float | None = Field(default=None, gt=0)
    resolution_wait_s: float | None = Field(default=None, gt=0)


class WaitKind(StrEnum):
    """What a person is waited for: each kind has a budget of its own (``Budgets.wait_s``)."""

    APPROVAL = "approval"
    REVIEW = "review"
    QUESTION = "question"
    RESOLUTION = "resolution"


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
    "approval_wait_s": StopReason.APPROVAL_EXPIRED,
    "review_wait_s": StopReason.REVIEW_EXPIRED,
    "question_wait_s": StopReason.QUESTION_EXPIRED,
    "resolution_wait_s": StopReason.RESOLUTION_EXPIRED,
}

"""The join's conclusion: what a joiner may decide when a round ends, and what the run does with that.

A joiner (a planner's ``decide``) answers ``Final``, ``NeedsHuman`` or ``Replan``. ``conclude`` weighs the
answer against the run as recorded (a hard limit that cut the round short, calls that never answered, the
answer's citations, the model and replan budgets) and returns the run's next step as a value: ``Finish`` it,
or plan a ``NextRound``. The driver records it; it decides nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from dag.budget import STOP_REASON_OF_BUDGET
from dag.errors import BudgetExceeded
from dag.evidence import MissingEvidence, describe_missing, missing_evidence
from dag.run_state import RunState
from dag.states import RunStatus, StopReason
from dag.storable import unfit_values
from dag.verify import unsupported_citations

# ---------------------------------------------------------------- what a joiner may decide


@dataclass(frozen=True)
class Final:
    """The run has its answer. ``citations`` are the evidence refs, codes and ids the answer rests on: the
    runtime verifies that each appears in a tool output of the run."""

    result: Mapping[str, Any]
    citations: Sequence[str]


@dataclass(frozen=True)
class NeedsHuman:
    stop_reason: StopReason
    detail: str
    result: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Replan:
    """Another round is needed; the next ``propose`` sees ``reason`` and the observations so far."""

    reason: str


JoinDecision = Final | NeedsHuman | Replan

# ---------------------------------------------------------------- what the run does next


@dataclass(frozen=True)
class Finish:
    """The run ends with ``status``: why (``stop_reason``, ``detail``) and what it keeps (``result``)."""

    status: RunStatus
    stop_reason: StopReason | None = None
    detail: str | None = None
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class NextRound:
    """The planner is asked for another round, shown ``reason``."""

    reason: str


Conclusion = Finish | NextRound


def out_of_model_budget(state: RunState) -> Finish | None:
    """The run's end if its model calls have spent the token or the cost budget, else ``None``."""
    try:
        state.budgets.check_usage(tokens=state.tokens_used, cost_usd=state.cost_usd)
    except BudgetExceeded as exc:
        return Finish(RunStatus.STOPPED, STOP_REASON_OF_BUDGET[exc.budget], str(exc))
    return None


def conclude(state: RunState, decision: JoinDecision) -> Conclusion:
    """What the run does with the joiner's ``decision`` on the round ``state`` is joining.

    An answer the run cannot record is the planner breaking its contract. An answer completes the run even
    past its model budget; anything else stops there. A round a hard limit cut short (a budget, the repeat
    gate, a withdrawn tool, the deadline) ends the run ``stopped`` with that limit's reason and detail,
    whatever the joiner decided: it judged less than the plan asked for, so its answer is kept as partial,
    never completes the run, and no replan goes around the limit.

    Failure is not evidence: while calls of the run have no answer, no verdict may stand — the run stops
    naming what is missing, and keeps no result. A replan of a round that drained may still ask again.

    A loop agent's child run (``RunState.max_steps``) is bounded by its steps in place of ``max_replans``: a
    replan asked for at its last step stops it ``STEP_LIMIT``.
    """
    problem = unrecordable(decision)
    if problem is not None:
        return Finish(RunStatus.NEEDS_HUMAN, StopReason.PLANNER_CONTRACT_VIOLATION, problem[:1000])
    if not isinstance(decision, Final):
        spent = out_of_model_budget(state)
        if spent is not None:
            return spent
    missing = missing_evidence(state, drained=state.interrupted_by is None)
    if state.interrupted_by is not None:
        cut_short = state.interruption_detail or state.interrupted_by.value
        detail, partial = _cut_short(state, cut_short, decision, missing)
        return Finish(RunStatus.STOPPED, state.interrupted_by, detail, partial)
    if missing and not isinstance(decision, Replan):
        return Finish(RunStatus.STOPPED, StopReason.EVIDENCE_INCOMPLETE, describe_missing(missing))
    match decision:
        case Final():
            unsupported = unsupported_citations(decision.citations, state)
            if unsupported:
                return Finish(
                    RunStatus.NEEDS_HUMAN,
                    StopReason.FINAL_ANSWER_UNSUPPORTED,
                    _unsupported(unsupported),
                    dict(decision.result),
                )
            return Finish(RunStatus.COMPLETED, result=dict(decision.result))
        case NeedsHuman():
            result = dict(decision.result) if decision.result is not None else None
            return Finish(RunStatus.NEEDS_HUMAN, decision.stop_reason, decision.detail, result)
        case Replan():
            try:
                state.budgets.check_stale(stale_replans=state.rounds_without_new_evidence())
                if state.max_steps is None:
                    state.budgets.check_replan(replans=state.round)
            except BudgetExceeded as exc:
                return Finish(
                    RunStatus.STOPPED, STOP_REASON_OF_BUDGET[exc.budget], f"{decision.reason}: {exc}"
                )
            if state.max_steps is not None and state.round >= state.max_steps:
                detail = f"the loop took its {state.max_steps} steps without a final answer"
                return Finish(RunStatus.STOPPED, StopReason.STEP_LIMIT, f"{decision.reason[:500]}: {detail}")
            return NextRound(decision.reason)
        case _:
            assert_never(decision)


def unrecordable(decision: JoinDecision) -> str | None:
    """Why ``decision`` cannot be recorded, if it cannot: a model may write a NUL, a lone surrogate or a
    non-finite number into its answer, or nest it past ``dag.storable.MAX_DEPTH``."""
    match decision:
        case Final(result=result, citations=citations):
            written: dict[str, Any] = {"result": dict(result), "citations": list(citations)}
        case NeedsHuman(detail=detail, result=result):
            written = {"detail": detail, "result": dict(result) if result is not None else None}
        case Replan(reason=reason):
            written = {"reason": reason}
    for pointer, problem in unfit_values(written):
        return f"the planner's answer cannot be recorded: {pointer}: {problem}"
    return None


def _cut_short(
    state: RunState, cut_short: str, decision: JoinDecision, missing: tuple[MissingEvidence, ...]
) -> tuple[str, dict[str, Any] | None]:
    """The detail and the partial result of a run whose round a hard limit cut short (``cut_short`` says
    which): the joiner's result is kept as it would be on a ``needs_human`` run, unless it rests on calls
    that have no answer."""
    if missing:
        return f"{cut_short}; {describe_missing(missing)}", None
    match decision:
        case Final(result=result, citations=citations):
            unsupported = unsupported_citations(citations, state)
            if unsupported:
                return f"{cut_short}; {_unsupported(unsupported)}", dict(result)
            return cut_short, dict(result)
        case NeedsHuman(result=result):
            return cut_short, dict(result) if result is not None else None
        case Replan():
            return cut_short, None
        case _:
            assert_never(decision)


def _unsupported(citations: list[str]) -> str:
    return f"the answer cites what no tool output of this run contains: {citations[:20]}"

"""``conclude``: what a run does with its joiner's decision, weighed against the run as recorded."""

from __future__ import annotations

import pytest
from dag_run_builders import (
    AT,
    CASE_ID,
    CASE_OUTPUT,
    CASE_TOOL,
    POLICY_OUTPUT,
    POLICY_TOOL,
    dispatched,
    failed,
    ran,
    run_created,
)

from dag.budget import Budgets
from dag.conclusion import (
    Final,
    Finish,
    JoinDecision,
    NeedsHuman,
    NextRound,
    Replan,
    conclude,
    out_of_model_budget,
    unrecordable,
)
from dag.events import (
    JoinStarted,
    ModelUsed,
    NodeReused,
    ParentLink,
    PlanAccepted,
    PlanningStarted,
    RunContinued,
    RunEvent,
)
from dag.fingerprint import action_fingerprint
from dag.run_state import RunState, fold
from dag.states import RunStatus, StopReason

CASE_ARGS = {"case_id": CASE_ID}
PLAN = {
    "nodes": [
        {"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS},
        {"id": "policy", "tool": POLICY_TOOL, "args": CASE_ARGS},
    ]
}
ANSWER = {"outcome": "DOCUMENTS_COMPLETE"}
CITED = Final(ANSWER, citations=[CASE_OUTPUT["evidence_ref"]])


def joining(
    *more: RunEvent, budgets: Budgets | None = None, interrupted: JoinStarted | None = None
) -> RunState:
    """A run joining its first round, in which ``case`` and ``policy`` ran (unless ``more`` says otherwise)."""
    ran_both = [
        *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
        *ran("policy", POLICY_TOOL, CASE_ARGS, POLICY_OUTPUT),
    ]
    return fold(
        [
            run_created(budgets=budgets),
            PlanningStarted(at=AT, round=1),
            PlanAccepted(at=AT, round=1, plan=PLAN),
            *(more or ran_both),
            interrupted if interrupted is not None else JoinStarted(at=AT, round=1),
        ]
    )


def used(tokens: int) -> ModelUsed:
    return ModelUsed(at=AT, purpose="join", model="m", input_tokens=tokens, output_tokens=0)


def test_an_answer_citing_what_the_run_observed_completes_the_run() -> None:
    assert conclude(joining(), CITED) == Finish(RunStatus.COMPLETED, result=ANSWER)


def test_an_answer_citing_what_no_output_holds_needs_a_human_and_keeps_the_answer() -> None:
    conclusion = conclude(joining(), Final(ANSWER, citations=["made-up://ref"]))

    assert conclusion == Finish(
        RunStatus.NEEDS_HUMAN,
        StopReason.FINAL_ANSWER_UNSUPPORTED,
        "the answer cites what no tool output of this run contains: ['made-up://ref']",
        ANSWER,
    )


def test_a_needs_human_verdict_ends_the_run_with_its_reason_and_result() -> None:
    verdict = NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "no policy", {"partial": True})

    assert conclude(joining(), verdict) == Finish(
        RunStatus.NEEDS_HUMAN, StopReason.INSUFFICIENT_EVIDENCE, "no policy", {"partial": True}
    )


def test_a_replan_within_the_budgets_is_the_next_round() -> None:
    assert conclude(joining(), Replan("need the documents")) == NextRound("need the documents")


def test_a_replan_past_max_replans_stops_the_run_on_the_replan_limit() -> None:
    conclusion = conclude(joining(budgets=Budgets(max_replans=0)), Replan("again"))

    assert conclusion == Finish(
        RunStatus.STOPPED, StopReason.REPLAN_LIMIT, "again: budget max_replans exhausted: 1 > 0"
    )


def looping(
    max_steps: int, rounds: int, budgets: Budgets | None = None, continued: RunContinued | None = None
) -> RunState:
    """A loop agent's child run of ``max_steps`` steps joining its ``rounds``-th, each round a new read (and
    ``continued``: the continuation of an earlier child)."""
    created = run_created(budgets=budgets).model_copy(
        update={"parent": ParentLink(run_id="run-0", node_id="research", depth=1, max_steps=max_steps)}
    )
    events: list[RunEvent] = [created, *([continued] if continued is not None else [])]
    for number in range(1, rounds + 1):
        node = {"id": "case", "tool": CASE_TOOL, "args": {"case_id": CASE_ID, "note": number}}
        node_id = "case" if number == 1 else f"r{number}.case"
        events += [
            PlanningStarted(at=AT, round=number),
            PlanAccepted(at=AT, round=number, plan={"nodes": [node]}),
            *ran(node_id, CASE_TOOL, node["args"], CASE_OUTPUT),
            JoinStarted(at=AT, round=number),
        ]
    return fold(events)


def test_a_loop_asking_for_another_step_after_its_last_stops_on_the_step_limit() -> None:
    assert conclude(looping(3, 2), Replan("one more")) == NextRound("one more")
    conclusion = conclude(looping(3, 3), Replan("one more"))

    assert conclusion == Finish(
        RunStatus.STOPPED,
        StopReason.STEP_LIMIT,
        "one more: the loop took its 3 steps without a final answer",
    )
    assert conclude(looping(3, 3), CITED) == Finish(RunStatus.COMPLETED, result=ANSWER)


def test_a_loop_child_continued_after_its_step_limit_has_its_steps_again() -> None:
    # The earlier child took its 2 steps and stopped STEP_LIMIT; its continuation counts its own from 1.
    continued = RunContinued(at=AT, continues="run-earlier-child", by="person:tenant-a/adjuster-7")
    resumed = looping(2, 1, continued=continued)
    assert resumed.continues == "run-earlier-child"
    assert conclude(resumed, Replan("one more")) == NextRound("one more")
    assert (
        conclude(looping(2, 2, continued=continued), Replan("one more")).stop_reason is StopReason.STEP_LIMIT
    )  # type: ignore[union-attr]


def test_a_loops_steps_bound_its_rounds_in_place_of_max_replans() -> None:
    assert conclude(looping(5, 4, Budgets(max_replans=1)), Replan("go on")) == NextRound("go on")
    assert conclude(looping(1, 1), Replan("go on")).stop_reason is StopReason.STEP_LIMIT  # type: ignore[union-attr]


def test_a_replan_after_a_round_without_new_evidence_stops_on_no_new_evidence() -> None:
    fingerprint = action_fingerprint(CASE_TOOL, CASE_ARGS)
    second = {"nodes": [{"id": "case", "tool": CASE_TOOL, "args": CASE_ARGS}]}
    state = fold(
        [
            run_created(budgets=Budgets(max_stale_replans=0)),
            PlanningStarted(at=AT, round=1),
            PlanAccepted(at=AT, round=1, plan=second),
            *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
            JoinStarted(at=AT, round=1),
            PlanningStarted(at=AT, round=2, reason="look again"),
            PlanAccepted(at=AT, round=2, plan=second),
            NodeReused(
                at=AT,
                node_id="r2.case",
                tool=CASE_TOOL,
                args=CASE_ARGS,
                fingerprint=fingerprint,
                source_node_id="case",
            ),
            JoinStarted(at=AT, round=2),
        ]
    )

    conclusion = conclude(state, Replan("once more"))

    assert conclusion == Finish(
        RunStatus.STOPPED, StopReason.NO_NEW_EVIDENCE, "once more: budget max_stale_replans exhausted: 1 > 0"
    )


def test_a_round_a_hard_limit_cut_short_stops_the_run_with_the_limit_and_keeps_the_answer_as_partial() -> (
    None
):
    cut = JoinStarted(
        at=AT, round=1, interrupted_by=StopReason.DEADLINE_EXCEEDED, reason="the run's deadline of 5s passed"
    )

    conclusion = conclude(joining(interrupted=cut), CITED)

    assert conclusion == Finish(
        RunStatus.STOPPED, StopReason.DEADLINE_EXCEEDED, "the run's deadline of 5s passed", ANSWER
    )


def test_a_round_cut_short_is_never_replanned_around_the_limit() -> None:
    cut = JoinStarted(at=AT, round=1, interrupted_by=StopReason.NODE_BUDGET_EXHAUSTED, reason="max_nodes")

    assert conclude(joining(interrupted=cut), Replan("more")) == Finish(
        RunStatus.STOPPED, StopReason.NODE_BUDGET_EXHAUSTED, "max_nodes", None
    )


def test_calls_that_never_answered_stop_the_run_whatever_the_verdict() -> None:
    state = joining(
        *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
        dispatched("policy", POLICY_TOOL, CASE_ARGS),
        failed("policy"),
    )

    conclusion = conclude(state, CITED)

    assert conclusion == Finish(
        RunStatus.STOPPED,
        StopReason.EVIDENCE_INCOMPLETE,
        f"evidence is incomplete: 1 call has no answer: policy ({POLICY_TOOL}: UPSTREAM_DOWN)",
    )
    assert isinstance(conclude(state, Replan("ask again")), NextRound)  # a replan may still ask again


@pytest.mark.parametrize(
    "decision",
    [
        Final({"text": "a\x00b"}, citations=[]),
        NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "\ud800"),
        Replan("\x00"),
    ],
    ids=["final-nul", "needs-human-surrogate", "replan-nul"],
)
def test_an_answer_no_run_can_record_is_the_planner_breaking_its_contract(decision: JoinDecision) -> None:
    conclusion = conclude(joining(), decision)

    assert isinstance(conclusion, Finish)
    assert (conclusion.status, conclusion.stop_reason) == (
        RunStatus.NEEDS_HUMAN,
        StopReason.PLANNER_CONTRACT_VIOLATION,
    )
    assert conclusion.detail == unrecordable(decision)
    assert conclusion.detail is not None
    assert conclusion.detail.startswith("the planner's answer cannot be recorded: /")


def test_an_answer_completes_the_run_past_its_model_budget_and_nothing_else_does() -> None:
    spent = joining(
        *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT),
        *ran("policy", POLICY_TOOL, CASE_ARGS, POLICY_OUTPUT),
        used(11),
        budgets=Budgets(max_tokens=10),
    )
    cited = Final(ANSWER, citations=[])
    stop = Finish(
        RunStatus.STOPPED, StopReason.TOKEN_BUDGET_EXHAUSTED, "budget max_tokens exhausted: 11 > 10"
    )

    assert out_of_model_budget(spent) == stop
    assert conclude(spent, cited) == Finish(RunStatus.COMPLETED, result=ANSWER)
    assert conclude(spent, Replan("more")) == stop
    assert conclude(spent, NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "?")) == stop


def test_a_run_within_its_model_budget_is_not_stopped_by_it() -> None:
    within = joining(
        *ran("case", CASE_TOOL, CASE_ARGS, CASE_OUTPUT), used(10), budgets=Budgets(max_tokens=10)
    )

    assert out_of_model_budget(within) is None


def test_the_planners_decision_types_are_the_cores() -> None:
    import planner
    import planner.base

    assert (planner.Final, planner.base.NeedsHuman, planner.base.Replan) == (Final, NeedsHuman, Replan)

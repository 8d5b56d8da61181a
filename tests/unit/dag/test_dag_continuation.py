"""Continuing a stopped run (``dag.continuation``): which runs may be continued, what a continuation carries
over (reads by output, writes by operation id, answers), its budgets, and how its state reuses what it
carried (``run_continued``, the fingerprint gate, ``node_reused`` from an earlier run)."""

from __future__ import annotations

from typing import Any

import pytest
from dag_run_builders import AT, CASE_ID, CASE_OUTPUT, CASE_TOOL, dispatched, failed, run_created, succeeded
from test_dag_agents import steps

from dag.agents import StartAgent
from dag.budget import BudgetAboveLimit, BudgetRequest, Budgets
from dag.continuation import (
    ContinueRefusal,
    Ledgered,
    carried_operations,
    carried_outputs,
    continue_refusal,
    continued_answers,
    continued_budgets,
    continues_child,
    stopped_on,
    unfinished_children,
)
from dag.dispatch import ReuseOutput
from dag.errors import EventRefused
from dag.events import (
    AgentStarted,
    CarriedAnswer,
    CarriedChild,
    CarriedOutput,
    NodeDispatched,
    NodeReused,
    PlanAccepted,
    PlanningStarted,
    QuestionAnswered,
    QuestionAsked,
    RunContinued,
    RunEvent,
    RunFinished,
)
from dag.fingerprint import action_fingerprint
from dag.gate import Dispatch, Reuse, ReuseCarried, gate
from dag.operations import OperationState
from dag.run_state import Answered, RunState, apply, fold
from dag.states import NodeStatus, RunStatus, StopReason

CASE_ARGS = {"case_id": CASE_ID}
FINGERPRINT = action_fingerprint(CASE_TOOL, CASE_ARGS)
WRITE_TOOL = "caseops_draft_document_request"
EARLIER = "11111111-1111-1111-1111-111111111111"
NOTHING: frozenset[str] = frozenset()


def is_read(tool: str) -> bool:
    return tool != WRITE_TOOL


def plan_of(*nodes: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return {"nodes": [{"id": node_id, "tool": tool, "args": args} for node_id, tool, args in nodes]}


def planned(*nodes: tuple[str, str, dict[str, Any]], first: RunEvent | None = None) -> list[RunEvent]:
    return [
        run_created(),
        *([first] if first is not None else []),
        PlanningStarted(at=AT, round=1),
        PlanAccepted(at=AT, round=1, plan=plan_of(*nodes)),
    ]


def finished(
    status: RunStatus = RunStatus.STOPPED, reason: StopReason = StopReason.DEADLINE_EXCEEDED
) -> RunEvent:
    return RunFinished(at=AT, status=status, stop_reason=reason, detail="the deadline passed")


def carried_case(run_id: str = EARLIER, node_id: str = "case") -> CarriedOutput:
    return CarriedOutput(
        fingerprint=FINGERPRINT,
        tool=CASE_TOOL,
        args=CASE_ARGS,
        output=CASE_OUTPUT,
        run_id=run_id,
        node_id=node_id,
    )


def continued(
    *outputs: CarriedOutput, answers: tuple[CarriedAnswer, ...] = (), children: tuple[CarriedChild, ...] = ()
) -> RunContinued:
    return RunContinued(
        at=AT,
        continues=EARLIER,
        by="person:tenant-demo/alice",
        outputs=outputs,
        answers=answers,
        children=children,
    )


# ---------------------------------------------------------------- which runs


@pytest.mark.parametrize("status", [RunStatus.STOPPED, RunStatus.NEEDS_HUMAN])
def test_a_stopped_run_or_one_that_needs_a_person_may_be_continued(status: RunStatus) -> None:
    assert continue_refusal(status) is None


@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED])
def test_a_completed_failed_or_cancelled_run_may_not(status: RunStatus) -> None:
    assert continue_refusal(status) is ContinueRefusal.NOT_CONTINUABLE


@pytest.mark.parametrize(
    "status", [RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.JOINING]
)
def test_a_live_run_is_not_finished(status: RunStatus) -> None:
    assert continue_refusal(status) is ContinueRefusal.NOT_FINISHED


# ---------------------------------------------------------------- what is carried


def test_only_reads_that_succeeded_are_carried_with_their_output_once_per_fingerprint() -> None:
    draft_args = {"case_id": CASE_ID, "missing_document_codes": ["X"]}
    state = fold(
        [
            *planned(
                ("case", CASE_TOOL, CASE_ARGS),
                ("again", CASE_TOOL, CASE_ARGS),
                ("policy", "caseops_get_policy_requirements", {"case_id": CASE_ID, "policy_id": "P"}),
                ("draft", WRITE_TOOL, draft_args),
            ),
            dispatched("case", CASE_TOOL, CASE_ARGS),
            succeeded("case", CASE_OUTPUT),
            NodeReused(
                at=AT,
                node_id="again",
                tool=CASE_TOOL,
                args=CASE_ARGS,
                fingerprint=FINGERPRINT,
                source_node_id="case",
            ),
            dispatched("policy", "caseops_get_policy_requirements", {"case_id": CASE_ID, "policy_id": "P"}),
            failed("policy"),
            dispatched("draft", WRITE_TOOL, draft_args),
            succeeded("draft", {"draft_id": "D-1"}),
            finished(),
        ]
    )

    [carried] = carried_outputs(state, is_read)

    assert carried == CarriedOutput(
        fingerprint=FINGERPRINT,
        tool=CASE_TOOL,
        args=CASE_ARGS,
        output=CASE_OUTPUT,
        run_id=state.run_id,
        node_id="case",
    )


def test_a_continuation_of_a_continuation_carries_the_whole_chains_reads_the_oldest_first() -> None:
    older = carried_case(run_id="00000000-0000-0000-0000-000000000000")
    state = fold(
        [
            *planned(("case", CASE_TOOL, CASE_ARGS), first=continued(older)),
            NodeReused(
                at=AT,
                node_id="case",
                tool=CASE_TOOL,
                args=CASE_ARGS,
                fingerprint=FINGERPRINT,
                source_node_id=older.node_id,
                source_run_id=older.run_id,
            ),
            finished(),
        ]
    )

    assert carried_outputs(state, is_read) == (older,)


def test_writes_are_carried_by_id_only_if_they_happened_or_may_have() -> None:
    writes = [
        Ledgered(WRITE_TOOL, f"hash-{state.value}", f"op-{state.value}", state) for state in OperationState
    ]

    carried = {operation.operation_id for operation in carried_operations(writes)}

    assert carried == {"op-succeeded", "op-unknown", "op-executing"}


def test_budgets_start_from_the_earlier_runs_lowered_to_todays_limits_and_may_be_raised_within_them() -> None:
    earlier = Budgets(deadline_s=30, max_nodes=200, max_replans=1)
    limits = Budgets(deadline_s=600, max_nodes=100)

    kept = continued_budgets(earlier, limits, None)
    raised = continued_budgets(earlier, limits, BudgetRequest(deadline_s=300, max_replans=2))

    assert (kept.deadline_s, kept.max_nodes, kept.max_replans) == (30, 100, 1)
    assert (raised.deadline_s, raised.max_nodes, raised.max_replans) == (300, 100, 2)
    with pytest.raises(BudgetAboveLimit) as above:
        continued_budgets(earlier, limits, BudgetRequest(deadline_s=900))
    assert above.value.above == {"deadline_s": (900, 600)}


def test_an_answer_goes_to_the_question_the_run_expired_on_after_the_earlier_answers() -> None:
    state = fold(
        [
            run_created(),
            PlanningStarted(at=AT, round=1),
            QuestionAsked(at=AT, round=1, number=1, text="Which case?", expires_at=AT),
            QuestionAnswered(at=AT, number=1, answer="C-102", by="person:t/a"),
            QuestionAsked(at=AT, round=1, number=2, text="Which year?", expires_at=AT),
            QuestionAnswered(at=AT, number=2, answer=None, by="supervisor:s"),
            RunFinished(at=AT, status=RunStatus.STOPPED, stop_reason=StopReason.QUESTION_EXPIRED),
        ]
    )

    assert continued_answers(state, "2026", "person:t/b") == (
        CarriedAnswer(question="Which case?", answer="C-102", by="person:t/a"),
        CarriedAnswer(question="Which year?", answer="2026", by="person:t/b"),
    )
    assert continued_answers(state, None, "person:t/b") == (
        CarriedAnswer(question="Which case?", answer="C-102", by="person:t/a"),
    )


def test_an_answer_to_a_run_that_stopped_on_something_else_answers_why_it_stopped() -> None:
    state = fold([run_created(), finished()])

    assert stopped_on(state) == (
        f"run {state.run_id} stopped (DEADLINE_EXCEEDED): the deadline passed. How should it go on?"
    )


# ---------------------------------------------------------------- the continuation's state


def test_run_continued_lends_the_state_its_reads_writes_and_answers() -> None:
    answer = CarriedAnswer(question="q", answer="a", by="person:t/a")
    event = RunContinued(
        at=AT,
        continues=EARLIER,
        by="person:tenant-demo/alice",
        outputs=(carried_case(),),
        operations=({"tool": WRITE_TOOL, "args_hash": "h", "operation_id": "op-1"},),  # type: ignore[arg-type]
        answers=(answer,),
    )

    state = apply(apply(None, run_created()), event)

    assert (state.continues, state.continued_by) == (EARLIER, "person:tenant-demo/alice")
    assert state.carried == {FINGERPRINT: carried_case()}
    assert state.carried_operations == {(WRITE_TOOL, "h"): "op-1"}
    assert state.answers == (Answered("q", "a", "person:t/a"),)


def test_run_continued_may_only_follow_run_created() -> None:
    state = fold([run_created(), PlanningStarted(at=AT, round=1)])

    with pytest.raises(EventRefused):
        apply(state, continued())
    with pytest.raises(EventRefused):
        apply(apply(apply(None, run_created()), continued()), continued())


def continuation(*more: RunEvent) -> RunState:
    return fold([*planned(("case", CASE_TOOL, CASE_ARGS), first=continued(carried_case())), *more])


def test_the_gate_reuses_a_carried_read_instead_of_calling_it_again() -> None:
    assert gate(continuation(), FINGERPRINT, dispatching=NOTHING, decided={}) == ReuseCarried(EARLIER, "case")
    other = action_fingerprint(CASE_TOOL, {"case_id": "C-103"})
    assert gate(continuation(), other, dispatching=NOTHING, decided={}) == Dispatch()


def test_a_node_reusing_a_carried_read_takes_its_output_and_names_the_earlier_run() -> None:
    state = continuation(
        NodeReused(
            at=AT,
            node_id="case",
            tool=CASE_TOOL,
            args=CASE_ARGS,
            fingerprint=FINGERPRINT,
            source_node_id="case",
            source_run_id=EARLIER,
        )
    )

    node = state.nodes["case"]
    assert (node.status, node.output, node.reused_from, node.reused_from_run) == (
        NodeStatus.REUSED,
        CASE_OUTPUT,
        "case",
        EARLIER,
    )
    assert state.proposals == {FINGERPRINT: 1}  # a reuse is a proposal: the repeat limit counts it


def test_a_reuse_naming_an_output_the_run_did_not_carry_is_refused() -> None:
    forged = NodeReused(
        at=AT,
        node_id="case",
        tool=CASE_TOOL,
        args=CASE_ARGS,
        fingerprint=FINGERPRINT,
        source_node_id="case",
        source_run_id="22222222-2222-2222-2222-222222222222",
    )

    with pytest.raises(EventRefused):
        continuation(forged)
    with pytest.raises(EventRefused):
        fold([*planned(("case", CASE_TOOL, CASE_ARGS)), forged])  # not a continuation at all


def test_within_the_continuation_its_own_succeeded_call_still_comes_first() -> None:
    state = fold(
        [
            *planned(("case", CASE_TOOL, CASE_ARGS), ("again", CASE_TOOL, CASE_ARGS), first=continued()),
            dispatched("case", CASE_TOOL, CASE_ARGS),
            succeeded("case", CASE_OUTPUT),
        ]
    )

    assert gate(state, FINGERPRINT, dispatching=NOTHING, decided={}) == Reuse("case")


# ---------------------------------------------------------------- agent nodes


RESEARCH = {
    "id": "research",
    "agent": {"goal": "read the case", "plan": plan_of(("inner", CASE_TOOL, CASE_ARGS))},
}
CHILD = "22222222-2222-2222-2222-222222222222"
CHILD_OUTPUT = {"run_id": CHILD, "result": {"outputs": {"inner": CASE_OUTPUT}}, "truncated": False}


def with_agent(*more: RunEvent, first: RunEvent | None = None) -> RunState:
    events = [run_created(), *([first] if first else []), PlanningStarted(at=AT, round=1)]
    return fold([*events, PlanAccepted(at=AT, round=1, plan={"nodes": [RESEARCH]}), *more])


def agent_ran(
    child_succeeded: bool | None, first: RunEvent | None = None, child: str = CHILD
) -> tuple[RunState, str]:
    """A run whose agent node ran its child run to success (or failure, or was stopped with its child in flight:
    ``None``); and the node's fingerprint."""
    (start,) = steps(with_agent())
    assert isinstance(start, StartAgent)
    ready = start.ready
    outcome: list[RunEvent] = (
        []
        if child_succeeded is None
        else [succeeded("research", CHILD_OUTPUT) if child_succeeded else failed("research", "STOPPED")]
    )
    state = with_agent(
        NodeDispatched(
            at=AT,
            node_id="research",
            tool="",
            args=ready.args,
            fingerprint=ready.fingerprint,
            attempt=1,
            decision=start.decision,
        ),
        AgentStarted(at=AT, node_id="research", child_run_id=child),
        *outcome,
        finished(),
        first=first,
    )
    return state, ready.fingerprint


def test_an_agent_node_whose_child_completed_is_carried_with_its_child_run_and_result() -> None:
    state, fingerprint = agent_ran(child_succeeded=True)
    (carried,) = carried_outputs(state, lambda tool: tool == CASE_TOOL)  # an agent node's tool is no read
    assert (carried.fingerprint, carried.tool, carried.node_id) == (fingerprint, "", "research")
    assert carried.output == CHILD_OUTPUT
    failed_state, _ = agent_ran(child_succeeded=False)
    assert carried_outputs(failed_state, lambda tool: tool == CASE_TOOL) == ()


def test_a_continuation_reuses_the_carried_agent_node_instead_of_starting_a_child() -> None:
    state, _ = agent_ran(child_succeeded=True)
    continuation = with_agent(first=continued(*carried_outputs(state, is_read)))
    (step,) = steps(continuation)
    assert isinstance(step, ReuseOutput)
    assert (step.ready.node_id, step.source_node_id, step.source_run_id) == (
        "research",
        "research",
        state.run_id,
    )


@pytest.mark.parametrize("child_succeeded", [False, None])
def test_an_agent_node_whose_child_did_not_complete_is_carried_as_a_child_to_continue(
    child_succeeded: bool | None,
) -> None:
    state, fingerprint = agent_ran(child_succeeded)
    assert unfinished_children(state) == (
        CarriedChild(fingerprint=fingerprint, child_run_id=CHILD, run_id=state.run_id, node_id="research"),
    )
    completed, _ = agent_ran(child_succeeded=True)
    assert unfinished_children(completed) == ()  # its output is carried instead


def test_a_continuations_own_child_replaces_the_one_it_carried_for_the_same_node() -> None:
    earlier, fingerprint = agent_ran(child_succeeded=False)
    again = "33333333-3333-3333-3333-333333333333"
    later, _ = agent_ran(False, first=continued(children=unfinished_children(earlier)), child=again)
    ((_, child),) = later.carried_children.items()
    assert child.child_run_id == CHILD  # what it carried, kept in its state
    (newest,) = unfinished_children(later)
    assert (newest.fingerprint, newest.child_run_id, newest.run_id) == (fingerprint, again, later.run_id)
    not_reached = with_agent(finished(), first=continued(children=unfinished_children(earlier)))
    assert unfinished_children(not_reached) == unfinished_children(earlier)  # carried on down the chain


def test_the_continued_agent_node_starts_its_child_as_a_continuation_of_the_earlier_child() -> None:
    state, _ = agent_ran(child_succeeded=False)
    (step,) = steps(with_agent(first=continued(children=unfinished_children(state))))
    assert isinstance(step, StartAgent)
    assert step.continues == CHILD
    (fresh,) = steps(with_agent())
    assert isinstance(fresh, StartAgent)
    assert fresh.continues is None


def test_a_changed_agent_node_starts_a_new_child() -> None:
    state, _ = agent_ran(child_succeeded=False)
    changed = {**RESEARCH, "agent": {**RESEARCH["agent"], "goal": "read the case again"}}  # type: ignore[dict-item]
    events = [run_created(), continued(children=unfinished_children(state)), PlanningStarted(at=AT, round=1)]
    (step,) = steps(fold([*events, PlanAccepted(at=AT, round=1, plan={"nodes": [changed]})]))
    assert isinstance(step, StartAgent)
    assert step.continues is None


@pytest.mark.parametrize(
    ("status", "continued_already", "pruned", "continues"),
    [
        (RunStatus.STOPPED, False, False, True),
        (RunStatus.NEEDS_HUMAN, False, False, True),
        (RunStatus.FAILED, False, False, False),
        (RunStatus.CANCELLED, False, False, False),
        (RunStatus.RUNNING, False, False, False),
        (RunStatus.STOPPED, True, False, False),
        (RunStatus.STOPPED, False, True, False),
    ],
)
def test_an_earlier_child_is_continued_only_if_any_run_so_ended_could_be(
    status: RunStatus, continued_already: bool, pruned: bool, continues: bool
) -> None:
    assert continues_child(status, continued=continued_already, pruned=pruned) is continues

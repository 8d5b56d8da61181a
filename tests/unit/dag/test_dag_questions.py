"""A planner's question: how the run waits on it, what an answer becomes, and when an answer is refused."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from dag_run_builders import AT, run_created

from dag.errors import EventRefused, IllegalTransition
from dag.events import PlanningStarted, QuestionAnswered, QuestionAsked, RunEvent
from dag.questions import AnswerRefusal, QuestionState, answer_refusal
from dag.run_state import Answered, fold
from dag.states import RunStatus

DUE = AT + timedelta(hours=1)


def asked(number: int = 1, round_number: int = 1) -> QuestionAsked:
    return QuestionAsked(at=AT, round=round_number, number=number, text="Which case?", expires_at=DUE)


def planning(*more: RunEvent) -> list[RunEvent]:
    return [run_created(), PlanningStarted(at=AT, round=1), *more]


def test_a_question_makes_the_run_wait_and_its_answer_sends_it_back_to_planning_with_its_author() -> None:
    waiting = fold(planning(asked()))
    answered = fold(planning(asked(), QuestionAnswered(at=AT, number=1, answer="C-102", by="person:t/alice")))

    assert (waiting.status, waiting.question, waiting.questions_asked) == (
        RunStatus.WAITING,
        (1, "Which case?"),
        1,
    )
    assert (answered.status, answered.question) == (RunStatus.PLANNING, None)
    assert answered.answers == (Answered("Which case?", "C-102", "person:t/alice"),)
    # The answer is data for the planner: the run's authority is what it was created with.
    assert (answered.principal, answered.resource, answered.budgets) == (
        waiting.principal,
        waiting.resource,
        waiting.budgets,
    )


def test_an_expired_question_is_no_answer() -> None:
    expired = fold(planning(asked(), QuestionAnswered(at=AT, number=1, answer=None, by="supervisor:s")))

    assert (expired.status, expired.question, expired.answers) == (RunStatus.WAITING, None, ())


@pytest.mark.parametrize(
    "events",
    [
        planning(asked(number=2)),  # numbered past the questions asked
        planning(asked(round_number=2)),  # of another round
        planning(asked(), asked(number=2)),  # asked while one waits
        planning(QuestionAnswered(at=AT, number=1, answer="x", by="p")),  # answered, never asked
        [run_created(), asked()],  # asked while the run was not planning
    ],
)
def test_the_reducer_refuses_a_question_out_of_turn(events: list[RunEvent]) -> None:
    with pytest.raises((EventRefused, IllegalTransition)):
        fold(events)


@pytest.mark.parametrize(
    ("state", "now", "expected"),
    [
        (QuestionState.AWAITING, AT, None),
        (QuestionState.AWAITING, DUE, AnswerRefusal.EXPIRED),
        (QuestionState.EXPIRED, AT, AnswerRefusal.EXPIRED),
        (QuestionState.ANSWERED, AT, AnswerRefusal.ALREADY_ANSWERED),
    ],
)
def test_an_answer_is_taken_only_while_the_question_waits(
    state: QuestionState, now: datetime, expected: AnswerRefusal | None
) -> None:
    assert answer_refusal(state, DUE, now=now) is expected

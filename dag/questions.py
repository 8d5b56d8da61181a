"""A planner's questions to a person: who may answer, and when an answer is refused.

A planner that cannot plan without a person answers with a question (``planner.base.Question``); the run
waits for a person with the answer scope. The answer reaches the planner as an observation with its author,
never as authority. A question counts against ``Budgets.max_questions``; one nobody answers by its deadline
stops the run (``QUESTION_EXPIRED``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

ANSWER_SCOPE = "runs:answer"
"""The scope a person needs to answer a run's planner."""

MAX_ANSWER_CHARS = 4000


class QuestionState(StrEnum):
    AWAITING = "awaiting"
    ANSWERED = "answered"
    EXPIRED = "expired"


class AnswerRefusal(StrEnum):
    """Why an answer was refused: each its own problem type."""

    NOT_FOUND = "question-not-found"
    ALREADY_ANSWERED = "question-already-answered"
    EXPIRED = "question-expired"


def answer_refusal(state: QuestionState, expires_at: datetime, *, now: datetime) -> AnswerRefusal | None:
    """Why a question in ``state``, due at ``expires_at``, takes no answer at ``now``; ``None`` if it does."""
    if state is QuestionState.EXPIRED or (state is QuestionState.AWAITING and now >= expires_at):
        return AnswerRefusal.EXPIRED
    if state is not QuestionState.AWAITING:
        return AnswerRefusal.ALREADY_ANSWERED
    return None

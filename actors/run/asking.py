"""A planner's question: the run waits for a person's answer, and the planner is asked again with it.

The question is recorded (a row of ``questions`` and ``QuestionAsked``: the run is ``waiting``) before the run
waits on it. The answer reaches the planner as an observation with its author (``PlanningContext.answers``),
never as authority: the run's tenant, principal, scopes, resource and budgets were fixed at its creation, and
every plan the planner proposes after it is validated and authorized against them as always.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from actors.run.recorder import RunRecorder, now
from actors.run.waiting import decided_or_park
from actors.store.questions import QuestionStore
from dag.budget import STOP_REASON_OF_BUDGET
from dag.errors import BudgetExceeded
from dag.events import QuestionAnswered, QuestionAsked, RunFinished
from dag.questions import QuestionState
from dag.states import RunStatus, StopReason

MAX_QUESTION_CHARS = 2000
"""A question longer than this is cut: it is shown to a person, not executed."""


class QuestionGate:
    def __init__(self, store: QuestionStore, *, actor: str) -> None:
        self._store = store
        self._actor = actor
        """Who expires a question nobody answered: ``supervisor:NAME``."""

    async def ask(self, run: RunRecorder, text: str) -> None:
        """Record the planner's question, and the run waits for its answer; past ``max_questions`` the run
        stops instead (``QUESTION_LIMIT``)."""
        state = run.state
        text = text.replace("\x00", "")[:MAX_QUESTION_CHARS] or "(an empty question)"
        number = state.questions_asked + 1
        try:
            state.budgets.check_questions(asked=number)
        except BudgetExceeded as exc:
            await run.finish(
                RunStatus.STOPPED, STOP_REASON_OF_BUDGET[exc.budget], f"{exc}; it asked: {text[:200]}"
            )
            return
        asked = await self._store.ask(
            run_id=state.run_id,
            number=number,
            round_number=state.round,
            tenant_id=state.principal.tenant_id,
            subject=state.principal.subject,
            text=text,
            expires_at=now() + timedelta(seconds=state.budgets.question_wait_s),
        )
        await run.record(
            QuestionAsked(
                at=now(), round=state.round, number=number, text=asked.text, expires_at=asked.expires_at
            )
        )

    async def hold(self, run: RunRecorder, cancel: asyncio.Event, handover: asyncio.Event) -> None:
        """Park the run until its pending question is answered: the run plans again once answered, and is
        finished otherwise (expired, cancelled)."""
        state = run.state
        assert state.question is not None, "a run waits on a question only once one was asked"
        number = state.question[0]
        question = await decided_or_park(
            run,
            lambda: self._store.get(state.run_id, number),
            awaiting=lambda row: row.state is QuestionState.AWAITING,
            expires_at=lambda row: row.expires_at,
            expire=lambda: self._store.settle(state.run_id, number, QuestionState.EXPIRED, by=self._actor),
            cancel=cancel,
            handover=handover,
            wait=f"question:{number}",
        )
        if question.state is QuestionState.ANSWERED:
            await run.record(
                QuestionAnswered(
                    at=now(), number=number, answer=question.answer, by=question.answered_by or ""
                )
            )
            return
        status, reason, detail = (
            (
                RunStatus.CANCELLED,
                StopReason.CANCELLED,
                "the run was cancelled while its planner's question waited",
            )
            if cancel.is_set()
            else (
                RunStatus.STOPPED,
                StopReason.QUESTION_EXPIRED,
                f"question {number} was not answered by {question.expires_at.isoformat()}",
            )
        )
        await run.record(
            QuestionAnswered(at=now(), number=number, answer=None, by=self._actor),
            RunFinished(at=now(), status=status, stop_reason=reason, detail=detail),
        )

"""A tool's question: a task (or a plain call, held open: ``actors.calls.mcp.held_calls``) that asks for input
mid-call waits for a person's answer, on its branch alone.

The task's question was recorded with its handle (``NodeTaskUpdated``) before it reaches here; here it becomes a
row of ``tool_questions`` (the run's inbox lists it) before anything waits on it. While it waits, the round's
other nodes go on, and the server is asked now and then whether it still waits: one that went on without the
answer (its own wait ended) withdraws the question. A person's decision wakes the waiter (the row's trigger);
the answer, a decline, or ``cancel`` for a question nobody decided in time is sent to the server, and the task
is followed on. Nothing is ever answered for a person, and an answer is never authority: it is the tool's
input, and what the run does next is gated by its policy as always.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from actors.calls.call import TaskHandle, ToolCall, ToolOutcome
from actors.run.recorder import RunRecorder, now
from actors.store.decisions import DecisionWakeups
from actors.store.tool_questions import ToolQuestion, ToolQuestionStore
from dag.tool_questions import MAX_SERVER_MESSAGE_CHARS, ToolQuestionState, form_problem, reply_of

log = logging.getLogger(__name__)

ASK_SERVER_EVERY_S = 5.0
"""How often a waiting question's server is asked whether it still waits for the answer."""
ABANDON_WITHIN_S = 5.0
"""How long a question whose run stopped is given to tell its server ``cancel`` and stop its task."""


class Follow(Protocol):
    """Follow a task on, first sending its server a reply to its question (``None``: only ask how it is);
    ``stop``: cancel the task instead."""

    def __call__(
        self, task: TaskHandle, reply: Mapping[str, Any] | None, *, stop: bool = False
    ) -> Awaitable[ToolOutcome]: ...


_abandoning: set[asyncio.Task[None]] = set()


class ToolQuestionGate:
    def __init__(self, store: ToolQuestionStore, *, actor: str, decisions: DecisionWakeups) -> None:
        self._store = store
        self._actor = actor
        """Who settles a question nobody decided, or its server withdrew: ``supervisor:NAME``."""
        self._decisions = decisions

    async def settle(
        self, run: RunRecorder, call: ToolCall, follow: Follow, *, let_go: asyncio.Event
    ) -> ToolOutcome:
        """The outcome of following ``call``'s task on once a person decided its question (or it expired, or
        the server withdrew it): a pending outcome with the task's new handle, or the task's result.

        Cancelled, the question is abandoned (expired, ``cancel`` sent, the task stopped), unless ``let_go`` is
        set (the run goes on elsewhere: handed over, or its lease lost): then it stays as it is, and the run's
        owner waits on it."""
        task = call.task
        assert task is not None, "only a task's question is settled here"
        asked = task.question
        assert asked is not None, "only a task that asks is settled here"
        state = run.state
        schema = asked.get("schema")
        unfit = asked.get("unfit") or (
            form_problem(schema) if isinstance(schema, dict) else "no schema was sent"
        )
        question = await self._store.ask(
            run_id=state.run_id,
            node_id=call.node_id,
            attempt=call.attempt,
            task_id=task.task_id,
            request_id=asked.get("id"),
            tenant_id=state.principal.tenant_id,
            subject=state.principal.subject,
            server=task.server,
            tool=call.tool,
            message=str(asked.get("message") or "").replace("\x00", "")[:MAX_SERVER_MESSAGE_CHARS],
            schema=schema if isinstance(schema, dict) else {},
            expires_at=_due(asked, now() + timedelta(seconds=state.budgets.question_wait_s)),
        )
        if unfit is not None and question.state is ToolQuestionState.AWAITING:
            log.warning("declining %s's question in run %s: %s", call.node_id, state.run_id, unfit)
            question = await self._decided(question, ToolQuestionState.DECLINED)
        try:
            with self._decisions.watching(state.run_id) as woken:
                while question.state is ToolQuestionState.AWAITING:
                    if now() >= question.expires_at:
                        question = await self._decided(question, ToolQuestionState.EXPIRED)
                        continue
                    woken.clear()
                    left_s = (question.expires_at - now()).total_seconds()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(max(0.0, min(ASK_SERVER_EVERY_S, left_s))):
                            await woken.wait()
                    if not woken.is_set() and now() < question.expires_at:
                        # shielded: a follow cut short stops the task, and letting the run go must not
                        outcome = await asyncio.shield(follow(task, None))
                        if not _still_asks(outcome, task):
                            await self._decided(question, ToolQuestionState.WITHDRAWN)
                            return outcome
                    question = await self._read(question)
        except asyncio.CancelledError:
            if not let_go.is_set():
                self._abandon(question, task, follow)
            raise
        return await follow(task, reply_of(question.state, question.content))

    async def _read(self, question: ToolQuestion) -> ToolQuestion:
        current = await self._store.get(question.run_id, question.question_id)
        assert current is not None, "a question is never deleted while its run waits on it"
        return current

    async def _decided(self, question: ToolQuestion, target: ToolQuestionState) -> ToolQuestion:
        """The question settled as ``target`` by the run, or as a person decided it a moment before."""
        await self._store.settle(question.run_id, question.question_id, target, by=self._actor)
        return await self._read(question)

    def _abandon(self, question: ToolQuestion, task: TaskHandle, follow: Follow) -> None:
        """The run stopped while the question waited: it expires, its server is told ``cancel`` and the task is
        cancelled, in the background (the run's end does not wait on the server)."""

        async def abandon() -> None:
            with contextlib.suppress(Exception):
                await self._store.settle(
                    question.run_id, question.question_id, ToolQuestionState.EXPIRED, by=self._actor
                )
            with contextlib.suppress(Exception):
                async with asyncio.timeout(ABANDON_WITHIN_S):
                    await follow(task, reply_of(ToolQuestionState.EXPIRED, None), stop=True)

        background = asyncio.get_running_loop().create_task(abandon())
        _abandoning.add(background)
        background.add_done_callback(_abandoning.discard)


def _due(asked: Mapping[str, Any], latest: datetime) -> datetime:
    """When a person's answer is due: ``latest`` (the run's wait for a question), or sooner if the call that
    asks must end sooner (a plain call's deadline, ``answer_by``)."""
    answer_by = asked.get("answer_by")
    if not isinstance(answer_by, str):
        return latest
    try:
        due = datetime.fromisoformat(answer_by)
    except ValueError:
        return latest
    return min(latest, due) if due.tzinfo is not None else latest


def _still_asks(outcome: ToolOutcome, task: TaskHandle) -> bool:
    """Whether the server still waits for the answer to ``task``'s question, as a look at the task found it."""
    followed = outcome.task
    if not outcome.pending or followed is None or followed.question is None or task.question is None:
        return False
    return followed.question.get("id") == task.question.get("id")

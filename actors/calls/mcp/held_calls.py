"""A plain call a server's question holds open: the 2025-11-25 ``elicitation/create`` a server sends in the middle
of a ``tools/call`` (no task), put to a person as a task's question is.

The server's request arrives while the call's own request is outstanding, and must be answered before the call
can go on. So the call runs on in the background of the process that made it (a caller, or the supervisor's own
loop), and the exchange that made it comes back at once with a handle as a task's (``TaskHandle``: its
``session`` names this process's ``HeldCalls``, ``call:<id>``; its ``question`` what the server asks). The run
records it and puts the question to a person exactly as a task's (``actors.run.tool_questions``); a later
exchange brings the answer here (a follow, ``follow``), which the held request returns to the server, and waits
for the call's result or its next question.

A held call lives only as long as this process: a follow that finds no such call (the process died and was
replaced, or the run is resumed by another supervisor) is ``TaskLost``, and the run does what it does for a lost
task (a read made again under the retry policy; a write ``unknown``, reconciled through its ledger). A plain call
keeps its deadline (the tool's ``call_s``): a question still waiting ``DECIDE_BEFORE_S`` before it is answered
``cancel`` (as a question nobody decided in time), and one that arrives later than that is declined at once, as
is anything but a form elicitation (a URL elicitation), a second question while one waits, and a question in a
process that cannot hold it (a Ray task's worker). A stdio server's question names no call: ``ask_sole`` finds
it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, RequestId

from actors.calls.call import HELD_SESSION, TaskHandle
from actors.calls.mcp.task_state import ELICIT, TaskLost, form_question
from actors.calls.mcp.watch import CallWatch, current_call, current_hold

DECIDE_BEFORE_S = 1.0
"""How long before its call's deadline a question still waiting is answered ``cancel``: the server is left that
long to go on with the answer before the call times out."""
ATTRIBUTE_WITHIN_S = 5.0
"""How long a stdio server's question waits for the other plain calls in flight to that server to end, so that
the one left is known to be the call that asks."""
KEEP_ENDED_S = 600.0
"""How long a held call that ended is kept for a follow to collect its result: one its run let go (handed over,
its lease lost) is never followed here again, and must not be kept for the life of the process."""
DECLINE: Mapping[str, Any] = {"action": "decline"}
CANCEL: Mapping[str, Any] = {"action": "cancel"}


@dataclass(eq=False)
class HeldCall:
    """One plain call in flight, and the question its server asks, if it asks one."""

    call_id: str
    server: str
    tool: str
    deadline: float
    """When the call's time is up, on the event loop's clock."""
    work: asyncio.Future[CallToolResult] | None = None
    question: dict[str, Any] | None = None
    answer: asyncio.Future[Mapping[str, Any]] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    watch: CallWatch | None = None
    """The call's record, which its requests read their token from: a follow brings a token minted for it (the
    call's own lives 60 s, and its answer may come hours later)."""

    async def ask(self, request_id: RequestId, params: ElicitRequestParams) -> ElicitResult:
        """The server's question, held until a person's answer comes (``reply``) or the call's time is nearly up;
        declined at once if it is no form, another already waits, or no time is left to ask anyone."""
        message = {
            "id": request_id,
            "method": ELICIT,
            "params": params.model_dump(by_alias=True, mode="json", exclude_none=True),
        }
        question = form_question(message)
        left_s = self.deadline - DECIDE_BEFORE_S - asyncio.get_running_loop().time()
        if question is None or self.question is not None or left_s <= 0 or self._ended:
            return ElicitResult.model_validate(dict(DECLINE))
        answer_by = datetime.now(UTC) + timedelta(seconds=left_s)
        self.question = {**question, "answer_by": answer_by.isoformat()}
        self.answer = answer = asyncio.get_running_loop().create_future()
        self.changed.set()
        try:
            async with asyncio.timeout(left_s):
                reply = await answer
        except TimeoutError:
            reply = CANCEL
        finally:
            self.question, self.answer = None, None
            self.changed.set()
        return ElicitResult.model_validate(dict(reply))

    def reply(self, reply: Mapping[str, Any]) -> None:
        """Answer the question that waits (nothing, if none does: the server went on without it)."""
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(reply)

    @property
    def _ended(self) -> bool:
        return self.work is not None and self.work.done()

    def handle(self, session: str) -> TaskHandle:
        """The call as a run records it: asking, or working on after its answer."""
        question = self.question
        return TaskHandle(
            server=self.server,
            task_id=self.call_id,
            status="input_required" if question is not None else "working",
            session=session,
            question=dict(question) if question is not None else None,
        )


class HeldCalls:
    """The plain calls of one process that a server's question holds (or may hold) open."""

    def __init__(self) -> None:
        self.session = f"{HELD_SESSION}{uuid.uuid4().hex}"
        self._held: dict[str, HeldCall] = {}
        self._open: dict[str, set[HeldCall]] = {}
        """Each stdio server's plain calls in flight: its questions name no call (``ask_sole``)."""

    async def call(
        self,
        server: str,
        tool: str,
        send: Callable[[], Awaitable[CallToolResult]],
        *,
        timeout_s: float,
        stdio: bool = False,
    ) -> CallToolResult | TaskHandle:
        """``send`` the call, bounded by ``timeout_s``: its result, or its handle once its server asks."""
        loop = asyncio.get_running_loop()
        held = HeldCall(uuid.uuid4().hex, server, tool, loop.time() + timeout_s, watch=current_call.get())
        reset = current_hold.set(held)
        try:  # the call's task, and each of its requests, carry the hold: its server's question finds it
            held.work = asyncio.ensure_future(_bounded(send, held.deadline))
        finally:
            current_hold.reset(reset)
        held.work.add_done_callback(lambda _: self._ended(held))
        if stdio:
            calls = self._open.setdefault(server, set())
            calls.add(held)
            held.work.add_done_callback(lambda _: calls.discard(held))
        try:
            return await self._next(held, within_s=None)
        except asyncio.CancelledError:
            self._drop(held)
            raise

    async def follow(
        self,
        handle: TaskHandle,
        reply: Mapping[str, Any] | None,
        *,
        within_s: float,
        stop: bool = False,
        token: str | None = None,
    ) -> CallToolResult | TaskHandle:
        """The held call's result, or its handle once its question changed (or ``within_s`` passed): ``reply``
        answers its question first; ``stop`` ends it (its question answered ``reply``, else ``cancel``).
        ``token``: the follow's own task token, which the call's requests carry from now on."""
        held = self._held.get(handle.task_id) if handle.session == self.session else None
        if held is None:
            raise TaskLost(f"call {handle.task_id} of {handle.server} was held by a process that has ended")
        if token and held.watch is not None and held.watch.token is not None:
            held.watch.token = token
        asked = handle.question.get("id") if handle.question is not None else None
        current = held.question.get("id") if held.question is not None else None
        if stop:
            held.reply(reply if reply is not None else CANCEL)
            self._drop(held)
            return replace(handle, status="cancelled", question=None)
        if reply is not None and asked is not None and asked == current:
            held.reply(reply)
            await _yield_until_taken(held)
        elif current is not None and asked == current:  # only asking whether the server still waits: it does
            return held.handle(self.session)
        try:
            return await self._next(held, within_s=within_s)
        except asyncio.CancelledError:
            self._drop(held)
            raise

    async def ask_sole(self, server: str, request_id: RequestId, params: ElicitRequestParams) -> ElicitResult:
        """A stdio server's question that names no task: a stdio server's messages carry no call's context, so it
        is taken as that of the one plain call to that server still in flight once the others in flight when it
        came have ended (the asking one cannot end: it waits for the answer), within ``ATTRIBUTE_WITHIN_S``.
        With none, or several still in flight, it is declined."""
        loop = asyncio.get_running_loop()
        candidates = {held for held in self._open.get(server, set()) if held.work is not None}
        give_up = loop.time() + ATTRIBUTE_WITHIN_S
        while len(candidates) > 1 and loop.time() < give_up:
            works: set[asyncio.Future[Any]] = {held.work for held in candidates if held.work is not None}
            await asyncio.wait(works, timeout=give_up - loop.time(), return_when=asyncio.FIRST_COMPLETED)
            candidates = {held for held in candidates if held.work is not None and not held.work.done()}
        if len(candidates) != 1:
            return ElicitResult.model_validate(dict(DECLINE))
        [held] = candidates
        return await held.ask(request_id, params)

    def close(self) -> None:
        """The process's connections close: every held call ends, its question cancelled."""
        for held in list(self._held.values()):
            self._drop(held)

    async def _next(self, held: HeldCall, *, within_s: float | None) -> CallToolResult | TaskHandle:
        """The call's result once it ended, else its handle once it asks (or ``within_s`` passed)."""
        assert held.work is not None
        held.changed.clear()
        if held.question is None:
            changed = asyncio.ensure_future(held.changed.wait())
            waiting: set[asyncio.Future[Any]] = {held.work, changed}
            try:
                await asyncio.wait(waiting, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
        if held.work.done():  # a question still held is one the server no longer waits for
            self._held.pop(held.call_id, None)
            held.reply(CANCEL)
            return held.work.result()
        self._held[held.call_id] = held
        return held.handle(self.session)

    def _ended(self, held: HeldCall) -> None:
        """A call that ended while held (a run handed on may never follow it here again) is kept a while for a
        follow to collect; one that never asked was never held, and costs nothing more."""
        if self._held.get(held.call_id) is held:
            asyncio.get_running_loop().call_later(KEEP_ENDED_S, self._held.pop, held.call_id, None)

    def _drop(self, held: HeldCall) -> None:
        self._held.pop(held.call_id, None)
        held.reply(CANCEL)
        if held.work is not None:
            held.work.cancel()


async def _bounded(send: Callable[[], Awaitable[CallToolResult]], deadline: float) -> CallToolResult:
    async with asyncio.timeout_at(deadline):
        return await send()


async def _yield_until_taken(held: HeldCall) -> None:
    """Let the held request answer the server before the follow looks again: it clears its question then."""
    for _ in range(100):
        if held.question is None:
            return
        await asyncio.sleep(0)

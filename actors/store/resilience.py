"""Retrying idempotent statements across dropped connections and a database restart, within deadlines."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import asyncpg
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_before_delay,
)

log = logging.getLogger(__name__)

_JITTER = random.Random()
"""The retries' own generator: a retry in a background thread never moves the ``random`` module's shared state."""


def _backoff(state: RetryCallState) -> float:
    """0.05 s, doubling, with up to 0.1 s of jitter; never more than 2 s."""
    return min(0.05 * 2.0 ** min(state.attempt_number - 1, 16) + _JITTER.uniform(0, 0.1), 2.0)


_T = TypeVar("_T")

CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.InterfaceError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    # A pooled connection whose backend was terminated while it sat idle sometimes fails its next statement
    # with this instead of ConnectionDoesNotExistError (MagicStack/asyncpg#1069); its reset then fails too,
    # so the pool discards it and the retry gets another connection.
    asyncpg.InternalClientError,
    # The server has no connection slot left (max_connections): it answers, but cannot take this one now.
    asyncpg.TooManyConnectionsError,
    ConnectionError,
    OSError,
)
"""Failures that say nothing about the statement, only that the server could not be reached."""

REQUEST_DEADLINE_S = 1.5
"""All the waiting one API request may do on PostgreSQL and the supervisor, together, before it answers 503:
docs/API.md promises that answer within two seconds."""
REQUEST_WINDOW_S = 1.0
"""A client is waiting: give up on one statement quickly (within the request's deadline, where one is set)."""
RUN_WINDOW_S = 60.0
"""A run is in the middle of a transition: ride out a database restart."""
QUEUE_S = 10.0
"""How long a request's statement may wait its turn at a pool whose connections are all in use while
PostgreSQL answers: a burst of requests queues, it is not an outage."""

_deadline: ContextVar[float | None] = ContextVar("raydag_request_deadline", default=None)


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached within the retry window."""


class DatabaseBusy(DatabaseUnavailable):
    """PostgreSQL answers, but every connection of the pool stayed in use for ``QUEUE_S``."""


class Line:
    """Turns at a shared resource (a pool's connections, the supervisor's intake) for requests, first come,
    first served.

    Waiting for a turn while the resource answers is queueing, not unavailability: it does not count against
    a request's deadline, and may last ``QUEUE_S``. Once a holder of a turn finds the resource unreachable,
    the line is in an outage until a holder is answered: whoever waits leaves at once, and so does whoever
    arrives to find no free turn, so that a burst during an outage still gets its 503 on time. Those who
    hold a turn go on trying, and the first of them to be answered ends the outage.
    """

    def __init__(
        self,
        turns: int,
        *,
        resource: str = "PostgreSQL",
        slot: str = "connection",
        unavailable: type[Exception] = DatabaseUnavailable,
        busy: type[Exception] = DatabaseBusy,
    ) -> None:
        """``unavailable`` is raised to those in line during an outage, ``busy`` to one whose turn did not
        come within ``QUEUE_S``; ``resource`` and ``slot`` name what they wait for, in their messages."""
        self._free = turns
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._outage_seen_at: float | None = None
        """When a holder last found the resource unreachable; ``None`` once one is answered (no outage)."""
        self._resource = resource
        self._slot = slot
        self._unavailable = unavailable
        self._busy = busy

    def probe(self) -> None:
        """One caller is about to try the resource again during an outage: the outage counts as seen now, so
        that those choosing between lines pass this one over until the probe is answered or refused."""
        if self._outage_seen_at is not None:
            self._outage_seen_at = time.monotonic()

    @property
    def outage_seen_at(self) -> float | None:
        """When (``time.monotonic()``) a holder last found the resource unreachable, if no one was answered
        since."""
        return self._outage_seen_at

    @asynccontextmanager
    async def turn(self, what: str) -> AsyncIterator[None]:
        """Hold a turn for the block; the request's ``deadline`` is moved on by the time spent in line."""
        queued_at = time.monotonic()
        await self._take(what)
        request_end = _deadline.get()
        if request_end is not None:
            _deadline.set(request_end + time.monotonic() - queued_at)
        try:
            yield
        finally:
            self._give_back()

    def answered(self) -> None:
        self._outage_seen_at = None

    def unreachable(self) -> None:
        self._outage_seen_at = time.monotonic()
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_exception(
                    self._unavailable(f"{self._resource} became unreachable while this waited")
                )

    async def _take(self, what: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        if self._outage_seen_at is not None:
            raise self._unavailable(
                f"{what}: {self._resource} is unreachable and every {self._slot} is in use"
            )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await asyncio.wait({waiter}, timeout=QUEUE_S)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._give_back()  # handed a turn just as the request gave up: pass it on
            waiter.cancel()
            raise
        if not waiter.done():
            waiter.cancel()  # _give_back and unreachable skip it
            raise self._busy(f"{what}: every {self._slot} stayed in use for {QUEUE_S:g}s")
        waiter.result()

    def _give_back(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free += 1


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Statements retried with ``REQUEST_WINDOW_S`` inside this block end, all together, within ``seconds``:
    one budget for a request however many statements it makes. A nested block starts a budget of its own."""
    token = _deadline.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def remaining_s() -> float:
    """What is left of the current deadline (``REQUEST_DEADLINE_S`` where none is set), never below zero."""
    end = _deadline.get()
    return REQUEST_DEADLINE_S if end is None else max(0.0, end - time.monotonic())


async def retrying(
    operation: Callable[[], Awaitable[_T]], *, window_s: float, what: str, line: Line | None = None
) -> _T:
    """Run ``operation`` (which must be idempotent) until it succeeds or ``window_s`` passes.

    The window bounds each attempt too, so a connection attempt or a statement that hangs on a server that
    does not answer ends with it. A request's statements (``window_s <= REQUEST_WINDOW_S``) also end by the
    request's ``deadline``; a run's transitions (``RUN_WINDOW_S``) never do: they outlive requests.

    With a ``line``, ``operation`` first waits its turn there, and the request's deadline is moved on by
    the time it waited: the window and the deadline measure the database, not the queue in front of it.
    """
    if line is None:
        return await _retrying(operation, window_s=window_s, what=what)
    async with line.turn(what):
        try:
            result = await _retrying(operation, window_s=window_s, what=what)
        except DatabaseUnavailable:
            line.unreachable()
            raise
        line.answered()
        return result


async def _retrying(operation: Callable[[], Awaitable[_T]], *, window_s: float, what: str) -> _T:
    end = time.monotonic() + window_s
    request_end = _deadline.get()
    if request_end is not None and window_s <= REQUEST_WINDOW_S:
        end = min(end, request_end)
    # Most statements need one attempt, so it is made without tenacity, whose loop costs about as much CPU
    # as a small statement (~0.1 ms). A failure of it starts the loop, which takes that failure as its own
    # first attempt's: the waits, the window and what is retried are the loop's, as if it had made it.
    first_failure: BaseException | None = None
    try:
        return await within(operation, max(0.0, end - time.monotonic()))
    except CONNECTION_ERRORS as exc:
        first_failure = exc
    retry = AsyncRetrying(
        stop=stop_before_delay(max(0.0, end - time.monotonic())),
        wait=_backoff,
        # A timed-out attempt used the window up (TimeoutError is an OSError, one of CONNECTION_ERRORS).
        retry=retry_if_exception_type(CONNECTION_ERRORS) & retry_if_not_exception_type(TimeoutError),
        reraise=True,
    )
    try:
        async for attempt in retry:
            with attempt:
                if first_failure is not None:
                    failure, first_failure = first_failure, None
                    raise failure
                log.warning(
                    "retrying %s after a database connection error (attempt %d)",
                    what,
                    attempt.retry_state.attempt_number,
                )
                return await within(operation, max(0.0, end - time.monotonic()))
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailable(
            f"{what}: PostgreSQL unreachable for {window_s:g}s ({type(exc).__name__})"
        ) from exc
    raise AssertionError("unreachable")  # pragma: no cover - tenacity either returns or raises


async def within(operation: Callable[[], Awaitable[_T]], seconds: float) -> _T:
    """``operation``'s result, or ``TimeoutError`` once ``seconds`` pass.

    Not ``asyncio.timeout``: a statement cancelled on a server that does not answer waits, while its
    connection goes back to the pool, for a cancel request that hangs as well. The attempt is left to
    finish cancelling in the background instead, and the caller gets its answer on time.
    """
    task = asyncio.ensure_future(operation())
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if task in done:
        return task.result()
    task.cancel()
    task.add_done_callback(_forget)
    raise TimeoutError(f"no answer within {seconds:.2f}s")


def _forget(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("an abandoned database attempt ended with %r", task.exception())

"""Retrying idempotent statements across dropped connections and a database restart."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import asyncpg
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_exponential_jitter

log = logging.getLogger(__name__)

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
    ConnectionError,
    OSError,
)
"""Failures that say nothing about the statement, only that the server could not be reached."""

REQUEST_WINDOW_S = 2.0
"""A client is waiting: give up quickly and answer 503 rather than hang."""
RUN_WINDOW_S = 60.0
"""A run is in the middle of a transition: ride out a database restart."""


class DatabaseUnavailable(Exception):
    """PostgreSQL could not be reached within the retry window."""


async def retrying(operation: Callable[[], Awaitable[_T]], *, window_s: float, what: str) -> _T:
    """Run ``operation`` (which must be idempotent) until it succeeds or ``window_s`` passes."""
    retry = AsyncRetrying(
        stop=stop_after_delay(window_s),
        wait=wait_exponential_jitter(multiplier=0.05, max=2.0, jitter=0.1),
        retry=retry_if_exception_type(CONNECTION_ERRORS),
        reraise=True,
    )
    try:
        async for attempt in retry:
            with attempt:
                if attempt.retry_state.attempt_number > 1:
                    log.warning(
                        "retrying %s after a database connection error (attempt %d)",
                        what,
                        attempt.retry_state.attempt_number,
                    )
                return await operation()
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailable(
            f"{what}: PostgreSQL unreachable for {window_s:g}s ({type(exc).__name__})"
        ) from exc
    raise AssertionError("unreachable")  # pragma: no cover - tenacity either returns or raises

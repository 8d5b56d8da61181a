"""Failures of the system of record the tools read: what they are, and how a tool answers them.

The tools' answers must say whether the data said "no" or the data could not be read. A query that fails
because PostgreSQL is down, restarting or unreachable is not a business answer: the tool answers the coded,
retryable ``UPSTREAM_UNAVAILABLE`` (with ``upstream`` naming what failed), never an uncoded error.
"""

from __future__ import annotations

import asyncpg

UPSTREAM_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08: the connection failed or was lost
    asyncpg.OperatorInterventionError,  # class 57: shutting down, starting up, crashed, cancelled
    asyncpg.InterfaceError,  # the pool or connection is closed, or was lost mid-statement
    asyncpg.InternalClientError,  # a pooled connection whose backend was terminated (asyncpg#1069)
    OSError,  # refused, reset, unreachable
    TimeoutError,
)
"""Exceptions of a query that say the database could not answer, nothing about the data."""

DATABASE = "database"
"""The ``upstream`` of a failure of the tools' PostgreSQL."""

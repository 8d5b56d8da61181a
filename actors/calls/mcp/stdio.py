"""A stdio MCP server as a long-lived child of the process that calls it, restarted when it dies.

Each ``ToolCaller`` actor owns one ``StdioServerProcess`` per stdio server of its toolsets: started with the
actor, one MCP session multiplexing all of the actor's calls over raydag's own transport
(``actors.calls.mcp.stdio_transport``), stopped with it. The server runs under ``stdio_guardian.py``, which
ends it when the actor's process dies, however it dies. A dead server is restarted with exponential backoff;
calls that arrive meanwhile wait for it up to the server's connect timeout.

The server's stderr is copied line by line to this process's stderr (a Ray actor's log), prefixed with the
server's name, its secrets redacted and then each line cut to ``STDERR_LINE_CHARS``, the lines forwarded
limited to a burst of ``STDERR_BURST`` refilled at ``STDERR_LINES_PER_S`` (what is dropped is counted and said).
Nothing a server writes there can end its session: only the end of the pipe, which is how a death is noticed
with or without a call in flight, or the end of its stdout (a server that closed it and runs on is stopped and
restarted as if it had died).
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from actors.calls.mcp.redaction import Redactor, server_secrets
from actors.calls.mcp.session import OwnedSession, client_mode, describe, make_client
from actors.calls.mcp.stdio_tasks import PlainQuestion, StdioTasks
from actors.calls.mcp.stdio_transport import LineFramer, Oversized, stdio_transport
from actors.calls.mcp.watch import Link
from actors.toolsets.config import FromEnv, StdioServer

GUARDIAN = Path(__file__).with_name("stdio_guardian.py")
BANNER = "raydag-stdio-guardian: "
BACKOFF_INITIAL_S = 0.25
BACKOFF_MAX_S = 30.0
STABLE_S = 10.0
"""A server that ran this long before dying is restarted at once, its backoff reset."""
STDERR_LINE_CHARS = 2_000
"""A longer stderr line is cut, and says how much was cut."""
STDERR_BURST = 200
STDERR_LINES_PER_S = 20.0
"""Lines forwarded from a server's stderr: a burst of ``STDERR_BURST``, refilled at this rate; the rest are
dropped, and how many (and how many bytes) is said once lines flow again."""


class ServerUnavailable(Exception):
    """The stdio server is not running now (starting, restarting, or failing to start)."""


@dataclass
class StdioStatus:
    """What ``ToolCaller.ping`` shows of one stdio server."""

    running: bool
    guardian_pid: int | None
    server_pid: int | None
    starts: int
    stderr_tail: list[str]


def server_parameters(spec: StdioServer) -> StdioServerParameters:
    """The guardian's command line around the server's, with the environment the spec names."""
    env: dict[str, str] = {}
    for name, value in spec.env.items():
        if isinstance(value, FromEnv):
            copied = os.environ.get(value.from_env)
            if copied is not None:
                env[name] = copied
        else:
            env[name] = value
    return StdioServerParameters(
        command=sys.executable,
        args=["-I", str(GUARDIAN), spec.command, *spec.args],
        env=env,
        cwd=spec.cwd,
    )


class StdioServerProcess:
    """One stdio server, its session and its restarts, in the event loop of the process that owns it."""

    def __init__(
        self, spec: StdioServer, *, tail_lines: int = 50, plain: PlainQuestion | None = None
    ) -> None:
        """``plain``: where the server's question within a plain call goes (``actors.calls.mcp.held_calls``)."""
        self.spec = spec
        self._plain = plain
        self._session: OwnedSession | None = None
        self._tasks: StdioTasks | None = None
        """The tasks of the running incarnation (``actors.calls.mcp.stdio_tasks``): they end with it."""
        self._up = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._pids: tuple[int | None, int | None] = (None, None)
        self.starts = 0

    def start(self) -> None:
        """Start the server and keep it running until ``stop``; returns at once."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"stdio-server:{self.spec.name}")

    async def client(self) -> Client:
        """The live session's client, waiting for a (re)start up to the connect timeout."""
        self.start()
        try:
            async with asyncio.timeout(self.spec.timeouts.connect_s):
                while True:
                    await self._up.wait()
                    session = self._session
                    if session is not None and session.usable and session.client is not None:
                        return session.client
                    await asyncio.sleep(0.01)
        except TimeoutError:
            raise ServerUnavailable(f"stdio server {self.spec.name!r} is not running") from None

    async def tasks(self) -> StdioTasks:
        """The running incarnation's tasks, waiting for a (re)start as ``client`` does: a task started there
        lives until that process ends."""
        client = await self.client()
        tasks = self._tasks
        if tasks is None or tasks.client is not client:
            raise ServerUnavailable(f"stdio server {self.spec.name!r} is restarting")
        return tasks

    def running_tasks(self) -> StdioTasks | None:
        """The running incarnation's tasks, without waiting: ``None`` while no process runs (a task of an
        earlier one is lost, and no later one can know it)."""
        tasks = self._tasks
        return tasks if tasks is not None and tasks.client is not None else None

    def status(self) -> StdioStatus:
        session = self._session
        return StdioStatus(
            running=session is not None and session.usable,
            guardian_pid=self._pids[0],
            server_pid=self._pids[1],
            starts=self.starts,
            stderr_tail=list(self._tail),
        )

    async def stop(self) -> None:
        """Stop the server (the SDK closes its stdin, then ends its process group) and stop restarting it."""
        self._stopping = True
        if self._session is not None:
            await self._session.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping:
            started = asyncio.get_running_loop().time()
            try:
                await self._run_once()
            except Exception as exc:  # a server that cannot start is retried, never fatal to its owner
                self._note(f"could not start or lost: {describe(exc)}")
            self._up.clear()
            if self._stopping:
                return
            lived = asyncio.get_running_loop().time() - started
            failures = 0 if lived >= STABLE_S else failures + 1
            delay = 0.0 if failures == 0 else min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * 2 ** (failures - 1))
            self._note(f"exited after {lived:.1f}s; restarting in {delay:g}s")
            await asyncio.sleep(delay)

    async def _run_once(self) -> None:
        read_fd, write_fd = os.pipe()
        errlog = os.fdopen(write_fd, "w")
        reader: asyncio.Task[None] | None = None
        redactor = Redactor(server_secrets(self.spec))
        tasks = StdioTasks(self.spec.name, self._plain)
        try:
            parameters = server_parameters(self.spec)
            mode = client_mode(self.spec.protocol)
            line_bytes = answer_line_bytes(self.spec)

            def connect(link: Link) -> Client:
                transport = stdio_transport(
                    parameters,
                    errlog,
                    max_line_bytes=line_bytes,
                    link=link,
                    note=lambda text: self._note(redactor.text(text)),
                )
                return make_client(transport, mode, tasks.elicit)

            session = OwnedSession(self.spec.name, connect)
            self._session = session
            self.starts += 1
            reader = asyncio.create_task(self._copy_stderr(read_fd, redactor))
            read_fd = -1  # the reader owns it now
            async with asyncio.timeout(self.spec.timeouts.connect_s):
                tasks.client = await session.start()
            self._tasks = tasks
            errlog.close()  # the server holds its own copy: the pipe ends when the server does
            self._up.set()
            # The end of its stderr, of its stdout (the link lost: a server that closed it and runs on is as
            # good as gone), or of the session, whichever comes first: the server is stopped and restarted.
            ended = {asyncio.ensure_future(session.ended()), asyncio.ensure_future(session.link.ended.wait())}
            await asyncio.wait({reader, *ended}, return_when=asyncio.FIRST_COMPLETED)
            for waiter in ended:
                waiter.cancel()
        finally:
            self._up.clear()
            tasks.client = None
            tasks.close()
            if not errlog.closed:
                errlog.close()
            if read_fd >= 0:
                os.close(read_fd)
            if self._session is not None:
                await self._session.close()
            if reader is not None:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
            self._pids = (None, None)

    async def _copy_stderr(self, fd: int, redactor: Redactor) -> None:
        """The server's stderr to this process's stderr, bounded (see the module's docstring); returns when
        the pipe closes, and only then."""
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(fd, "rb")
        )
        framer = LineFramer(STDERR_LINE_CHARS * 4)  # UTF-8: a character is at most four bytes
        forward = _Throttle(STDERR_BURST, STDERR_LINES_PER_S)
        try:
            while chunk := await stream.read(1 << 16):
                for line in framer.feed(chunk):
                    text = stderr_text(line, redactor)
                    if text.startswith(BANNER):
                        self._pids = _pids_of(text.removeprefix(BANNER).split())
                        continue
                    dropped = forward.take(time.monotonic(), len(text))
                    if dropped is not None:
                        lines, size = dropped
                        self._note(f"dropped {lines:,} lines ({size:,} bytes) of stderr: too many, too fast")
                    if forward.passed:
                        self._note(text)
        finally:
            transport.close()
            if forward.dropped_lines:
                lines, size = forward.dropped_lines, forward.dropped_bytes
                self._note(f"dropped {lines:,} lines ({size:,} bytes) of stderr: too many, too fast")

    def _note(self, text: str) -> None:
        self._tail.append(text)
        print(f"[stdio:{self.spec.name}] {text}", file=sys.stderr, flush=True)


def answer_line_bytes(spec: StdioServer) -> int:
    """The longest line read from ``spec``'s stdout: an answer of its largest allowed output (see
    ``actors.calls.mcp.connections.answer_bytes``)."""
    return 2 * spec.largest_output_bytes + (64 << 10)


def stderr_text(line: bytes | Oversized, redactor: Redactor) -> str:
    """One line of a server's stderr as it is shown: its secrets redacted, then cut to ``STDERR_LINE_CHARS``
    (in this order, so that no part of a secret survives the cut)."""
    if isinstance(line, Oversized):
        text, size = line.prefix.decode("utf-8", "replace"), line.size
    else:
        text, size = line.decode("utf-8", "replace"), len(line)
    text = redactor.text(text)
    if isinstance(line, Oversized) or len(text) > STDERR_LINE_CHARS:
        return f"{text[:STDERR_LINE_CHARS]} [cut: a line of {size:,} bytes]"
    return text


class _Throttle:
    """A token bucket over lines: ``take`` says whether a line passes (``passed``), and, when lines pass again
    after some were dropped, how many were dropped meanwhile."""

    def __init__(self, burst: int, per_s: float) -> None:
        self._burst = burst
        self._per_s = per_s
        self._tokens = float(burst)
        self._at = time.monotonic()
        self.passed = True
        self.dropped_lines = 0
        self.dropped_bytes = 0

    def take(self, now: float, size: int) -> tuple[int, int] | None:
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens < 1:
            self.passed = False
            self.dropped_lines += 1
            self.dropped_bytes += size
            return None
        self._tokens -= 1
        self.passed = True
        if not self.dropped_lines:
            return None
        dropped = (self.dropped_lines, self.dropped_bytes)
        self.dropped_lines = self.dropped_bytes = 0
        return dropped


def _pids_of(fields: Iterable[str]) -> tuple[int | None, int | None]:
    values = dict(field.split("=", 1) for field in fields if "=" in field)
    guardian, server = values.get("pid"), values.get("server")
    return (int(guardian) if guardian else None, int(server) if server else None)

"""raydag's stdio transport: a server's stdin and stdout, read so that no answer can hang a call or fill memory.

It replaces the SDK's ``stdio_client`` (which starts the process the same way: a session of its own, the
inherited environment trimmed by ``get_default_environment``) in three ways:

- **Lines are bounded.** A line longer than ``max_line_bytes`` is never held: its first and last 64 KiB are
  kept to find the request it answers, the rest is read and dropped, and that request fails at once with
  ``OUTPUT_TOO_LARGE``.
- **A line that cannot be used fails its request at once** (``actors.calls.mcp.answers``) instead of being
  dropped while the call waits out its timeout.
- **The connection's end is told by the transport.** Each request is noted in the session's ``Link`` as
  it is sent, in the task of the call that sends it (``Link.sending``), and settled when its answer is
  read. When the server's stdout ends, a write to its stdin fails, or the owner closes the session, the
  link is lost (``Link.lose``) before the session hears of it: every call still waiting is cut off, and is
  a lost connection whatever error the session then raises. A JSON-RPC error a server answers (-32000,
  "Connection closed") settles its request like any answer, and never stands for a lost connection.

What the server writes on stderr is not read here: it goes to the pipe the owner passes (``errlog``).
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import IO

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client._transport import TransportStreams
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage

from actors.calls.mcp.answers import (
    Faulted,
    Ignored,
    Unattributed,
    fault_message,
    oversized,
    read_line,
)
from actors.calls.mcp.watch import Link, current_call

CHUNK = 1 << 16
KEPT = 1 << 16
"""How much of an over-long line's start and end is kept to find the request it answers."""
GRACE_S = 2.0
"""How long a server has to exit once its stdin is closed, and again once it is told to stop."""


@dataclass(frozen=True)
class Oversized:
    """A line longer than the framer's limit: its first and last bytes, and how long it was."""

    prefix: bytes
    tail: bytes
    size: int


@dataclass
class LineFramer:
    """Splits a byte stream into lines of at most ``limit`` bytes (without their ``\\n`` or ``\\r\\n``). A
    longer line is reported as ``Oversized`` once it ends, and never held whole."""

    limit: int
    _line: bytearray = field(default_factory=bytearray)
    _dropping: Oversized | None = None

    def feed(self, chunk: bytes) -> list[bytes | Oversized]:
        lines: list[bytes | Oversized] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            self._take(piece)
            if end < 0:
                return lines
            lines.append(self._finish())
            start = end + 1

    def _take(self, piece: bytes) -> None:
        dropping = self._dropping
        if dropping is not None:
            tail = (dropping.tail + piece)[-KEPT:]
            self._dropping = Oversized(dropping.prefix, tail, dropping.size + len(piece))
        elif len(self._line) + len(piece) > self.limit:
            line = self._line
            prefix = bytes(line[:KEPT]) + piece[: max(0, KEPT - len(line))]
            tail = (bytes(line[-KEPT:]) + piece)[-KEPT:]
            self._dropping = Oversized(prefix, tail, len(line) + len(piece))
            self._line = bytearray()
        else:
            self._line += piece

    def _finish(self) -> bytes | Oversized:
        if self._dropping is not None:
            done, self._dropping = self._dropping, None
            return done
        line = bytes(self._line).removesuffix(b"\r")
        self._line.clear()
        return line


@asynccontextmanager
async def stdio_transport(
    parameters: StdioServerParameters,
    errlog: IO[str],
    *,
    max_line_bytes: int,
    link: Link,
    note: Callable[[str], None],
) -> AsyncIterator[TransportStreams]:
    """Start the server ``parameters`` names and yield the session's streams; stop it on exit (stdin closed,
    then the process group ended). ``note`` receives what the server wrote on stdout that answered nothing."""
    process = await anyio.open_process(
        [parameters.command, *parameters.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        env=get_default_environment() | (parameters.env or {}),
        cwd=parameters.cwd,
        start_new_session=True,
    )
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    write_stream = _NotedWrites(to_server, link)

    async def deliver(message: SessionMessage) -> None:
        root = message.message
        if isinstance(root, types.JSONRPCResponse | types.JSONRPCError) and root.id is not None:
            link.settled(root.id)
        await to_session.send(message)

    async def read() -> None:
        assert process.stdout is not None
        framer = LineFramer(max_line_bytes)
        try:
            async with to_session:
                while True:
                    try:
                        chunk = await process.stdout.receive(CHUNK)
                    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                        break
                    for line in framer.feed(chunk):
                        reading = (
                            oversized(line.prefix, line.tail, line.size, max_line_bytes)
                            if isinstance(line, Oversized)
                            else read_line(line)
                        )
                        match reading:
                            case SessionMessage():
                                await deliver(reading)
                            case Faulted(request_id=request_id, problem=problem):
                                await deliver(fault_message(request_id, problem))
                            case Unattributed(problem=problem):
                                note(f"stdout: {problem.error.message}; every request in flight fails")
                                for request_id, _ in list(link.waiting.values()):
                                    await deliver(fault_message(request_id, problem))
                            case Ignored(why=why):
                                note(f"stdout: a line that answers nothing ({why})")
                link.lose()  # before the session sees its stream end
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            link.lose()  # the session is gone: keep reading so the server is never blocked writing
            await _drain(process)

    async def write() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await process.stdin.send(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            link.lose()
            await to_session.aclose()  # the session sees the connection end rather than waiting forever

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read)
        tasks.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            link.lose()  # whoever ends the session (its owner has said so already, see ``OwnedSession.close``)
            with anyio.CancelScope(shield=True):
                await read_stream.aclose()
                await write_stream.aclose()
                await _stop(process)
            tasks.cancel_scope.cancel()


class _NotedWrites:
    """The session's write stream: notes each request in the link as it is sent, in the task of the call that
    sends it (whose ``current_call`` is that call's), and refuses one once the connection has ended."""

    def __init__(self, inner: MemoryObjectSendStream[SessionMessage], link: Link) -> None:
        self._inner = inner
        self._link = link

    async def send(self, message: SessionMessage, /) -> None:
        root = message.message
        if isinstance(root, types.JSONRPCRequest):
            if not self._link.sending(root.id, current_call.get()):
                raise anyio.ClosedResourceError  # the session raises it as its connection closed
        elif isinstance(root, types.JSONRPCNotification) and root.method == "notifications/cancelled":
            cancelled = (root.params or {}).get("requestId")
            if isinstance(cancelled, int | str):
                self._link.settled(cancelled)
        await self._inner.send(message)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _NotedWrites:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


async def _drain(process: Process) -> None:
    assert process.stdout is not None
    with contextlib.suppress(
        anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError
    ):
        while True:
            await process.stdout.receive(CHUNK)


async def _stop(process: Process) -> None:
    """Close the server's stdin (the MCP way to ask it to exit), then end its whole process group: the server
    if it is still running, and anything it left behind if it is not."""
    assert process.stdin is not None
    assert process.stdout is not None
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
    await _exited(process, GRACE_S)
    await terminate_posix_process_tree(process, GRACE_S)  # at once if the group is gone
    await _exited(process, GRACE_S)
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdout.aclose()
    # The asyncio subprocess transport stays open (and warns when collected) while anything the server left
    # behind holds a pipe; nothing public closes it (the SDK's stdio client does the same).
    transport = getattr(getattr(process, "_process", None), "_transport", None)
    close = getattr(transport, "close", None)
    if callable(close):
        with contextlib.suppress(PermissionError):
            close()


async def _exited(process: Process, within_s: float) -> bool:
    """Whether the process exited within ``within_s``. Its return code, not ``wait()``: a child that still
    holds the pipes would make an exited server look alive."""
    with anyio.move_on_after(within_s):
        while process.returncode is None:  # noqa: ASYNC110 (no event tells a process's exit but its pipes)
            await anyio.sleep(0.01)
    return process.returncode is not None

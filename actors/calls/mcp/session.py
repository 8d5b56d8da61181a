"""One MCP SDK client held open for many calls, and the options every raydag client is built with.

anyio requires the task that enters a client's task group to leave it, and calls come from many tasks, so
an ``OwnedSession`` enters its client in a task of its own and keeps it until closed or until its transport
ends. A server's request for user input is put to a person only where a call can wait for one: a task's
(``actors.calls.mcp.tasks``, ``stdio_tasks``) or a plain call's held open by the process that made it
(``actors.calls.mcp.held_calls``, found through ``current_hold``). Every other one is declined: no tool call of a
run may be given an answer nobody gave.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from typing import Any

from mcp import Client
from mcp.client._transport import Transport
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp_types import ElicitRequestParams, ElicitResult, Implementation
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from actors.calls.mcp.watch import Link, current_hold
from actors.toolsets.config import ProtocolEra
from actors.toolsets.listing import ServerListing, ToolDefinition

CLIENT_INFO = Implementation(name="raydag", version="0.1.0")
MAX_LIST_PAGES = 100
"""A server whose ``tools/list`` pages never end cannot hang discovery."""


async def decline_elicitation(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """Nobody is there to answer: the honest answer is no."""
    return ElicitResult(action="decline")


async def elicit_for_call(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
    """The question of the plain call whose request it arrived on, held for a person where that call can wait
    (``current_hold``); declined where it cannot, or where it belongs to no call."""
    held = current_hold.get()
    if held is None:
        return await decline_elicitation(context, params)
    return await held.ask(context.request_id, params)


def client_mode(era: ProtocolEra | str) -> str:
    """The SDK's ``mode`` for a toolset era: ``auto``, a modern version pinned, or ``legacy``."""
    if era == "auto" or era in MODERN_PROTOCOL_VERSIONS:
        return era
    return "legacy"


def make_client(transport: Transport, mode: str, elicitation: ElicitationFnT | None = None) -> Client:
    """An SDK client as raydag uses one: no response cache (each call is fresh), a server's question held for
    the plain call it belongs to (``elicit_for_call``) unless ``elicitation`` takes it (a stdio server's tasks,
    ``actors.calls.mcp.stdio_tasks``)."""
    return Client(
        transport,
        mode=mode,
        cache=None,
        client_info=CLIENT_INFO,
        elicitation_callback=elicitation or elicit_for_call,
    )


def is_modern(client: Client) -> bool:
    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


async def list_all_tools(client: Client, server: str) -> ServerListing:
    """Every page of ``tools/list``, as definitions."""
    tools: list[ToolDefinition] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(
            ToolDefinition.of(tool.model_dump(mode="json", by_alias=True, exclude_none=True))
            for tool in page.tools
        )
        cursor = page.next_cursor
        if cursor is None:
            break
    return ServerListing(server=server, protocol_version=client.protocol_version, tools=tuple(tools))


class OwnedSession:
    """One SDK client, entered and exited by a task of its own, shared by every call while it lasts.
    ``connect`` builds the client over a transport that notes its end in the ``Link`` it is given."""

    def __init__(self, name: str, connect: Callable[[Link], Client]) -> None:
        self._name = name
        self._connect = connect
        self.link = Link()
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.client: Client | None = None
        self.closed = False

    @property
    def usable(self) -> bool:
        """Whether calls may be sent over it: started, not closed, and its connection not lost."""
        return self.client is not None and not self.closed and not self.link.lost

    async def start(self) -> Client:
        # The session outlives the call that opens it: a question on its own streams belongs to no call.
        context = contextvars.copy_context()
        context.run(current_hold.set, None)
        self._task = asyncio.create_task(self._run(), name=f"mcp-session:{self._name}", context=context)
        await self._ready.wait()
        if self.client is None:
            await self._task  # re-raises why it could not start
            raise RuntimeError("the MCP session ended before it started")
        return self.client

    async def _run(self) -> None:
        try:
            async with self._connect(self.link) as client:
                self.client = client
                self._ready.set()
                await self._closing.wait()
        finally:
            self.closed = True
            self.client = None
            self._ready.set()

    async def close(self) -> None:
        """End the session. Its link is lost first, so that a call still waiting on it is known to be cut off
        before the session fails it."""
        self.link.lose()
        self._closing.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def ended(self) -> None:
        """Wait until the session has ended, for whatever reason."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


def describe(exc: BaseException) -> str:
    """An exception as a log or error may show it: its type only (its text may echo arguments)."""
    leaf: Any = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    return type(leaf).__name__


class _NoExceptionText(logging.Filter):
    """The SDK logs exceptions whose text may quote what a server sent (a parse error repeats its input, which
    may repeat a secret): the record is kept, with the exception's type instead of its text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[0] is not None:
            record.msg = f"{record.getMessage()} ({record.exc_info[0].__name__})"
            record.args = None
        record.exc_info = None
        record.exc_text = None
        return True


_QUIET = _NoExceptionText()


def quiet_sdk_logs() -> None:
    """Strip exception texts from the MCP SDK's loggers (each logger filters only its own records)."""
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        ours = name == "mcp" or name.startswith("mcp.")
        if ours and isinstance(logger, logging.Logger) and _QUIET not in logger.filters:
            logger.addFilter(_QUIET)

"""The ToolCaller Ray actor: makes many tool calls at once from one event loop. It holds no run state.

The default way to perform a call (``RAYDAG_TOOL_EXECUTOR=callers``; ``actors.tool_task`` is the other). A
Ray task per call needs a worker process per call in flight; an async actor makes hundreds of calls
concurrently in one process, over one ``McpConnections`` (keep-alive connections, one 2026-07-28 client per
server URL). Each call still carries its own token and its node's trace context, and returns an outcome the
supervisor applies.

A caller owns the stdio servers of the toolsets it is given: each runs as a child process of the actor,
started with it, restarted when it dies, and stopped with it (``actors.mcp_client.stdio``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from actors.mcp_client import McpConnections, ToolCall, ToolOutcome, call_tool
from actors.toolsets.config import HttpServer, StdioServer
from actors.toolsets.discovery import TokenFor, discover
from actors.toolsets.listing import ServerListing
from actors.tracing import configure_tracing
from dag.contracts import ToolContract


class ToolCaller:
    """Calls tools for the supervisor that created it; cancelling a call's actor task cancels the call."""

    def __init__(self, servers: Sequence[HttpServer | StdioServer] = ()) -> None:
        configure_tracing("raydag-tool-caller")
        self._servers = {server.name: server for server in servers}
        self._connections: McpConnections | None = None
        self._in_flight = 0
        self._calls = 0
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # constructed outside an event loop (not as an actor): the servers start on first use
        self._open()  # a Ray async actor is built in its event loop: its stdio servers start with it

    def _open(self) -> McpConnections:
        if self._connections is None:  # built inside the actor's event loop, which it serves
            self._connections = McpConnections(list(self._servers.values()))
            self._connections.start()
        return self._connections

    async def start(self) -> None:
        """Make sure the stdio servers are started (the pool calls this as soon as it creates the caller)."""
        self._open()

    async def call(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """One call. The contract travels with it so the output is checked against the tool's schema."""
        connections = self._open()
        self._in_flight += 1
        self._calls += 1
        try:
            return await call_tool(call, {contract.name: contract}, connections)
        finally:
            self._in_flight -= 1

    async def list_tools(self, server: str, token: str | None = None) -> ServerListing:
        """What ``server`` lists now, over this caller's own connection to it (a pin re-check)."""
        spec = self._servers[server]
        token_for: TokenFor | None = (lambda _: token) if token is not None else None
        return await discover(spec, token_for=token_for, connections=self._open())

    async def stop(self) -> None:
        """Stop the stdio servers and close the connections (the actor's end does the same, less politely)."""
        connections, self._connections = self._connections, None
        if connections is not None:
            await connections.aclose()

    async def ping(self) -> dict[str, Any]:
        """Its process, the calls it is making now and those it has taken, and its stdio servers."""
        stdio = self._connections.stdio_status() if self._connections is not None else {}
        return {
            "pid": os.getpid(),
            "in_flight": self._in_flight,
            "calls": self._calls,
            "stdio": {name: dataclasses.asdict(status) for name, status in stdio.items()},
        }

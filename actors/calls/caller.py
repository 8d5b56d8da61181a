"""The ToolCaller Ray actor: makes many tool calls at once from one event loop. It holds no run state.

The default way to perform a call (``RAYDAG_TOOL_EXECUTOR=callers``; ``actors.calls.task`` is the other). A
Ray task per call needs a worker process per call in flight; an async actor makes hundreds of calls
concurrently in one process, over one ``McpConnections`` (keep-alive connections, one 2026-07-28 client per
server URL). Each call still carries its own token and its node's trace context, and returns an outcome the
supervisor applies.

Calls come in *exchanges* (``actors.calls.executors.CallerPoolExecutor``): one actor call hands over the calls a step
made ready and waits for outcomes, so a layer of calls costs a few actor calls rather than one each.

A caller owns the stdio servers of the toolsets it is given: each runs as a child process of the actor,
started with it, restarted when it dies, and stopped with it (``actors.calls.mcp.stdio``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from actors.calls.call import ToolCall, ToolOutcome
from actors.calls.exchange import CALLS_IN_FLIGHT, pack, unpack, worker_failed
from actors.calls.mcp import McpConnections, call_tool
from actors.calls.mcp.discovery import TokenFor, discover
from actors.observe.tracing import configure_tracing
from actors.toolsets.config import HttpServer, StdioServer
from actors.toolsets.listing import ServerListing
from dag.contracts import ToolContract

CANCEL_MEMORY_S = 60.0
"""How long a cancel for a call this caller has not seen is remembered, in case its call is still to come."""


@dataclass
class _Session:
    """One pool's calls on this caller: those in flight by ticket, and the outcomes not yet taken."""

    calls: dict[int, asyncio.Task[ToolOutcome]] = field(default_factory=dict)
    landed: list[tuple[int, ToolOutcome]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_unseen: dict[int, float] = field(default_factory=dict)
    """Tickets cancelled before their call arrived, by when to forget them. Ray runs an async actor's calls out
    of order: the exchange carrying a cancel can run before the one carrying the call it cancels. (The call may
    also have landed already: then its ticket is forgotten after ``CANCEL_MEMORY_S``.)"""

    def cancel(self, tickets: Sequence[int], now: float) -> None:
        """Cancel the calls ``tickets`` name; remember those not seen yet (and forget old ones)."""
        if self.cancelled_unseen:
            self.cancelled_unseen = {
                ticket: until for ticket, until in self.cancelled_unseen.items() if until > now
            }
        for ticket in tickets:
            task = self.calls.pop(ticket, None)
            if task is not None:
                task.cancel()
            else:
                self.cancelled_unseen[ticket] = now + CANCEL_MEMORY_S


class ToolCaller:
    """Calls tools for the supervisor that created it; a call cancelled by its pool is cancelled here."""

    def __init__(
        self, servers: Sequence[HttpServer | StdioServer] = (), *, calls_at_once: int = CALLS_IN_FLIGHT
    ) -> None:
        configure_tracing("raydag-tool-caller")
        self._servers = {server.name: server for server in servers}
        self._connections: McpConnections | None = None
        self._calls_at_once = calls_at_once
        self._gate: asyncio.Semaphore | None = None
        self._sessions: dict[str, _Session] = {}
        self._in_flight = 0
        self._calls = 0
        self._exchanges = 0
        self._largest_handover = 0
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # constructed outside an event loop (not as an actor): the servers start on first use
        self._open()  # a Ray async actor is built in its event loop: its stdio servers start with it

    def _open(self) -> McpConnections:
        if self._connections is None:  # built inside the actor's event loop, which it serves
            self._connections = McpConnections(list(self._servers.values()), hold_questions=True)
            self._connections.start()
            self._gate = asyncio.Semaphore(self._calls_at_once)
        return self._connections

    async def start(self) -> None:
        """Make sure the stdio servers are started (the pool calls this as soon as it creates the caller)."""
        self._open()

    async def call(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """One call. The contract travels with it so the output is checked against the tool's schema.

        Following a task takes none of the ``calls_at_once`` slots: it holds nothing of the server's and no
        connection between its polls, and a slot held by each of many long tasks' follows left every other
        call of the supervisor waiting behind them (docs/BENCHMARKS.md, long tasks)."""
        connections = self._open()
        assert self._gate is not None
        async with self._gate if call.task is None else contextlib.nullcontext():
            self._in_flight += 1
            self._calls += 1
            try:
                return await call_tool(call, {contract.name: contract}, connections)
            finally:
                self._in_flight -= 1

    async def exchange(
        self,
        session: str,
        calls: Sequence[tuple[int, ToolCall]],
        contracts: Mapping[str, ToolContract],
        cancels: Sequence[int],
    ) -> list[tuple[int, ToolOutcome]]:
        """Cancel the calls ``cancels`` names, start ``calls`` (by ticket; ``contracts`` their tools'), then
        wait until one of ``session``'s calls has landed or none is in flight, and hand over every outcome of
        ``session`` that has landed. At most ``calls_at_once`` calls run at once; the rest wait their turn."""
        self._exchanges += 1
        self._largest_handover = max(self._largest_handover, len(calls))
        state = self._sessions.setdefault(session, _Session())
        state.cancel(cancels, time.monotonic())
        if cancels:  # an exchange waiting for the calls just cancelled must not wait for them
            state.changed.set()
        for ticket, call in calls:
            if state.cancelled_unseen.pop(ticket, None) is not None:
                continue  # cancelled by an exchange that ran before this one: never started
            task = asyncio.get_running_loop().create_task(self.call(call, contracts[call.tool]))
            state.calls[ticket] = task
            task.add_done_callback(functools.partial(self._landed, state, ticket))
        while not state.landed and state.calls:
            state.changed.clear()
            await state.changed.wait()
        landed, state.landed = state.landed, []
        if not state.calls and not state.cancelled_unseen and self._sessions.get(session) is state:
            del self._sessions[session]
        return landed

    async def packed_exchange(self, handover: bytes) -> bytes:
        """``exchange`` with its arguments and its answer each packed into one ``bytes`` (``pack``): what the
        pool sends. Ray handles every argument of an actor call on its own way there and back; one ``bytes``
        instead of four arguments holding calls and contracts took an exchange's round trip from ~2.1 to ~1.6 ms
        and its submission from 0.43 to 0.25 ms (docs/BENCHMARKS.md, 2026-12-03)."""
        session, calls, contracts, cancels = unpack(handover)
        return pack(await self.exchange(session, calls, contracts, cancels))

    def _landed(self, state: _Session, ticket: int, task: asyncio.Task[ToolOutcome]) -> None:
        if state.calls.get(ticket) is not task:
            return  # cancelled by its pool, which wants no outcome
        del state.calls[ticket]
        if task.cancelled():  # the actor is stopping
            outcome = worker_failed(datetime.now(UTC), asyncio.CancelledError())
        elif task.exception() is not None:  # a call never raises for its own failure: raydag's machinery did
            outcome = worker_failed(datetime.now(UTC), task.exception() or RuntimeError())
        else:
            outcome = task.result()
        state.landed.append((ticket, outcome))
        state.changed.set()

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
        """Its process and Ray node, the calls it is making now and those it has taken, the exchanges they came
        in (and the most calls one handed over), and its stdio servers."""
        stdio = self._connections.stdio_status() if self._connections is not None else {}
        import ray

        return {
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "in_flight": self._in_flight,
            "calls": self._calls,
            "exchanges": self._exchanges,
            "largest_handover": self._largest_handover,
            "stdio": {name: dataclasses.asdict(status) for name, status in stdio.items()},
        }

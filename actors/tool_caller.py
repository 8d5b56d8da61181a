"""The ToolCaller Ray actor: makes many tool calls at once from one event loop. It holds no run state.

The other way to perform a call (``RAYDAG_TOOL_EXECUTOR=callers``; ``actors.tool_task`` is the default). A Ray
task per call needs a worker process per call in flight; an async actor makes hundreds of calls concurrently in
one process, over one ``McpConnections`` (keep-alive connections, one 2026-07-28 client per server URL). Each
call still carries its own token and its node's trace context, and returns an outcome the supervisor applies.
"""

from __future__ import annotations

import os
from typing import Any

from actors.mcp_client import McpConnections, ToolCall, ToolOutcome, call_tool
from actors.tracing import configure_tracing
from dag.contracts import ToolContract


class ToolCaller:
    """Calls tools for the supervisor that created it; cancelling a call's actor task cancels the call."""

    def __init__(self) -> None:
        configure_tracing("raydag-tool-caller")
        self._connections: McpConnections | None = None
        self._in_flight = 0
        self._calls = 0

    async def call(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        """One call. The contract travels with it so the output is checked against the tool's model."""
        if self._connections is None:
            self._connections = McpConnections()  # built inside the actor's event loop, which it serves
        self._in_flight += 1
        self._calls += 1
        try:
            return await call_tool(call, {contract.name: contract}, self._connections)
        finally:
            self._in_flight -= 1

    async def ping(self) -> dict[str, Any]:
        """Its process, the calls it is making now and the calls it has taken since it started."""
        return {"pid": os.getpid(), "in_flight": self._in_flight, "calls": self._calls}

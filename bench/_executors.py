"""Executors for the supervisor: the one raydag ships, a sketched fix, and two that peel layers off.

- ``mcp``: ``RayToolExecutor`` as shipped: a Ray task per call, calling the tool over MCP.
- ``callers``: a sketch, not shipped: a few async ``ToolCaller`` actors make the calls, many at once each.
- ``ray``: a Ray task per call that answers without calling the tool server.
- ``inline``: the call is answered inside the supervisor: what remains is the control plane alone.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from datetime import UTC, datetime

import ray

from actors.executor import RayToolExecutor, ToolExecutor
from actors.mcp_client import McpConnections, ToolCall, ToolOutcome, call_tool
from bench._synthetic import CATALOGUE, WaitOutput
from dag.contracts import ToolCatalogue, ToolContract


class InstantExecutor:
    """Answers every call at once, in the supervisor's process: what is left is the control plane alone."""

    async def run(self, call: ToolCall) -> ToolOutcome:
        at = datetime.now(UTC)
        output = WaitOutput(node=call.args["node"], waited_ms=0, upstream=call.args["upstream"], payload="")
        return ToolOutcome(output=output.model_dump(), error=None, started_at=at, finished_at=at)


@ray.remote(num_cpus=0.05, max_retries=0)
def _instant_task(call: ToolCall) -> ToolOutcome:
    at = datetime.now(UTC)
    output = WaitOutput(node=call.args["node"], waited_ms=0, upstream=call.args["upstream"], payload="")
    return ToolOutcome(output=output.model_dump(), error=None, started_at=at, finished_at=at)


class RayInstantExecutor:
    """One Ray task per call, as in production, but the task answers without calling the tool server."""

    async def run(self, call: ToolCall) -> ToolOutcome:
        outcome: ToolOutcome = await _instant_task.remote(call)
        return outcome


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ToolCaller:
    """A sketch of a fix, not shipped: an async actor making many tool calls at once from one event loop over
    one ``McpConnections``, where a Ray task needs a worker process per call in flight."""

    def __init__(self) -> None:
        self._connections: McpConnections | None = None

    async def call(self, call: ToolCall, contract: ToolContract) -> ToolOutcome:
        if self._connections is None:
            self._connections = McpConnections()
        return await call_tool(call, {contract.name: contract}, self._connections)


class CallerPoolExecutor:
    """Round-robin over a few ``ToolCaller`` actors (one per core by default)."""

    def __init__(self, catalogue: ToolCatalogue, size: int = 2) -> None:
        self._catalogue = catalogue
        self._callers = [
            ToolCaller.options(max_concurrency=1000).remote()  # type: ignore[attr-defined]
            for _ in range(size)
        ]
        self._next = itertools.cycle(self._callers)

    async def run(self, call: ToolCall) -> ToolOutcome:
        ref = next(self._next).call.remote(call, self._catalogue[call.tool])
        try:
            outcome: ToolOutcome = await ref
            return outcome
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise


EXECUTORS: dict[str, Callable[[], ToolExecutor]] = {
    "mcp": lambda: RayToolExecutor(CATALOGUE),
    "callers": lambda: CallerPoolExecutor(CATALOGUE),
    "ray": RayInstantExecutor,
    "inline": InstantExecutor,
}
"""Each is built inside the supervisor actor, on first use."""

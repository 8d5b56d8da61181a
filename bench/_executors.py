"""Executors for the supervisor: the three raydag ships, and two that peel layers off.

- ``mcp``: ``RayToolExecutor`` (``RAYDAG_TOOL_EXECUTOR=tasks``): a Ray task per call, calling the tool over MCP.
- ``callers``: ``CallerPoolExecutor``: two async ``ToolCaller`` actors make the calls, many at once each.
- ``supervisor``: ``InlineExecutor`` (``RAYDAG_TOOL_EXECUTOR=supervisor``): the supervisor's own loop makes them.
- ``ray``: a Ray task per call that answers without calling the tool server.
- ``inline``: the call is answered inside the supervisor: what remains is the control plane alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import ray

from actors.executor import CallerPoolExecutor, InlineExecutor, RayToolExecutor, ToolExecutor
from actors.mcp_client import ToolCall, ToolOutcome
from bench._synthetic import CATALOGUE, WaitOutput


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


EXECUTORS: dict[str, Callable[[], ToolExecutor]] = {
    "mcp": lambda: RayToolExecutor(CATALOGUE),
    "callers": lambda: CallerPoolExecutor(CATALOGUE, name_prefix=f"bench-tool-caller-{uuid.uuid4().hex[:8]}"),
    "supervisor": lambda: InlineExecutor(CATALOGUE),
    "ray": RayInstantExecutor,
    "inline": InstantExecutor,
}
"""Each is built inside the supervisor actor, on first use."""

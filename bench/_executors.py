"""Executors for the supervisor: the three raydag ships, and two that peel layers off.

- ``mcp``: ``RayToolExecutor`` (``RAYDAG_TOOL_EXECUTOR=tasks``): a Ray task per call, calling the tool over MCP.
- ``callers``: ``CallerPoolExecutor``: an async ``ToolCaller`` actor makes the calls, many at once.
- ``supervisor``: ``InlineExecutor`` (``RAYDAG_TOOL_EXECUTOR=supervisor``): the supervisor's own loop makes them.
- ``callers2``: the same with two ``ToolCaller`` actors (``RAYDAG_TOOL_CALLERS=2``, the default until
  2026-12-02).
- ``callers-per-call``: two ``ToolCaller`` actors, each call its own actor task (what
  ``callers`` shipped until exchanges batched them): the comparison for the batching.
- ``ray``: a Ray task per call that answers without calling the tool server.
- ``inline``: the call is answered inside the supervisor: what remains is the control plane alone.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import ray

from actors.calls.call import ToolCall, ToolExecutor, ToolOutcome
from actors.calls.exchange import calls_per_caller
from actors.calls.executors import CallerPoolExecutor, InlineExecutor, RayToolExecutor, task_name
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


class PerCallCallers:
    """Two ``ToolCaller`` actors, each call an actor task of its own, round-robin: ``callers`` before its
    calls were handed over in exchanges."""

    def __init__(self, size: int = 2) -> None:
        from actors.calls.caller import ToolCaller

        prefix = f"bench-per-call-caller-{uuid.uuid4().hex[:8]}"
        self._callers: list[Any] = [
            ray.remote(ToolCaller)
            .options(
                name=f"{prefix}-{index}",
                num_cpus=0,
                max_concurrency=calls_per_caller(size),
                max_task_retries=0,
            )
            .remote()
            for index in range(size)
        ]
        self._next = itertools.cycle(self._callers)

    async def run(self, call: ToolCall) -> ToolOutcome:
        ref = next(self._next).call.options(name=task_name(call.tool)).remote(call, CATALOGUE[call.tool])
        try:
            outcome: ToolOutcome = await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        return outcome


EXECUTORS: dict[str, Callable[[], ToolExecutor]] = {
    "mcp": lambda: RayToolExecutor(CATALOGUE),
    "callers": lambda: CallerPoolExecutor(CATALOGUE, name_prefix=f"bench-tool-caller-{uuid.uuid4().hex[:8]}"),
    "callers2": lambda: CallerPoolExecutor(
        CATALOGUE, size=2, name_prefix=f"bench-tool-caller-{uuid.uuid4().hex[:8]}"
    ),
    "supervisor": lambda: InlineExecutor(CATALOGUE),
    "callers-per-call": PerCallCallers,
    "ray": RayInstantExecutor,
    "inline": InstantExecutor,
}
"""Each is built inside the supervisor actor, on first use."""

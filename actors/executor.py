"""How the supervisor hands a node to be executed. In production each call is a Ray task."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol

from actors.mcp_client import ToolCall, ToolOutcome
from dag.contracts import ToolCatalogue
from dag.events import ErrorKind, NodeError


class ToolExecutor(Protocol):
    def run(self, call: ToolCall) -> Coroutine[Any, Any, ToolOutcome]:
        """Execute one call. The coroutine returns an outcome for every failure of the call; cancelling it
        cancels the call."""
        ...


class RayToolExecutor:
    """One Ray task per tool call, named ``tool:<tool>:<node>`` for the dashboard."""

    def __init__(self, catalogue: ToolCatalogue, num_cpus: float = 0.05) -> None:
        self._catalogue = catalogue
        self._num_cpus = num_cpus

    async def run(self, call: ToolCall) -> ToolOutcome:
        import ray
        from ray.exceptions import RayError

        from actors.tool_task import execute_tool_call

        ref = execute_tool_call.options(
            name=f"tool:{call.tool}:{call.node_id}", num_cpus=self._num_cpus
        ).remote(call, self._catalogue[call.tool])
        started = datetime.now(UTC)
        try:
            outcome: ToolOutcome = await ref
            return outcome
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except RayError as exc:  # the worker died or the task could not run: the call's effect is unknown
            return ToolOutcome(
                output=None,
                error=NodeError(kind=ErrorKind.TRANSIENT, code="WORKER_FAILED", message=type(exc).__name__),
                started_at=started,
                finished_at=datetime.now(UTC),
            )

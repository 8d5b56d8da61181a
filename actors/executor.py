"""How the supervisor hands a node to be executed: a Ray task per call, or a pool of async caller actors.

Both return the same outcomes, carry the same per-call token and trace context, and cancel the call when the
supervisor cancels the coroutine; they differ in processes. A Ray task in flight occupies a worker process
of its own (Ray starts them on demand, a few at a time, and reaps idle ones after a second), so many calls at
once mean many processes; a ``ToolCaller`` actor makes hundreds of calls at once in one process.
docs/BENCHMARKS.md ("Load through Serve") has the measurements behind the choice.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Coroutine
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, assert_never

from dag.contracts import ToolCatalogue
from dag.events import ErrorKind, NodeError

if TYPE_CHECKING:  # the settings import ExecutorKind from here: keep the MCP SDK out of that import
    from actors.mcp_client import ToolCall, ToolOutcome


class ToolExecutor(Protocol):
    def run(self, call: ToolCall) -> Coroutine[Any, Any, ToolOutcome]:
        """Execute one call. The coroutine returns an outcome for every failure of the call; cancelling it
        cancels the call."""
        ...


class ExecutorKind(StrEnum):
    """``RAYDAG_TOOL_EXECUTOR``: how tool calls are executed."""

    TASKS = "tasks"
    """A Ray task per call (``RayToolExecutor``)."""
    CALLERS = "callers"
    """A few long-lived async actors, each making many calls at once (``CallerPoolExecutor``)."""


def build_executor(
    kind: ExecutorKind, catalogue: ToolCatalogue, *, callers: int, name_prefix: str, namespace: str
) -> ToolExecutor:
    """The executor ``kind`` names; caller actors are named ``<name_prefix>-<i>`` in ``namespace``."""
    match kind:
        case ExecutorKind.TASKS:
            return RayToolExecutor(catalogue)
        case ExecutorKind.CALLERS:
            pool = CallerPoolExecutor(catalogue, size=callers, name_prefix=name_prefix, namespace=namespace)
            pool.start()
            return pool
        case _:
            assert_never(kind)


def _worker_failed(started: datetime, exc: BaseException) -> ToolOutcome:
    """The process making the call died or the call could not run: its effect is unknown, retry may help."""
    from actors.mcp_client import ToolOutcome

    return ToolOutcome(
        output=None,
        error=NodeError(kind=ErrorKind.TRANSIENT, code="WORKER_FAILED", message=type(exc).__name__),
        started_at=started,
        finished_at=datetime.now(UTC),
    )


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
        except RayError as exc:
            return _worker_failed(started, exc)


CALLS_PER_CALLER = 32
"""How many calls one caller makes at once; more wait in its queue. A supervisor's calls in flight (this ×
``RAYDAG_TOOL_CALLERS``) stay under the MCP server's per-tenant limit (128 in flight per replica): past it the
server answers 429, the calls are retried, and under heavy load runs fail on it (docs/BENCHMARKS.md)."""


class CallerPoolExecutor:
    """Calls round-robin over ``size`` ``ToolCaller`` actors, each running up to ``max_concurrency`` at once.

    The actors belong to the supervisor that creates them (they end with it), take no CPU reservation (they
    wait on I/O) and are restarted by Ray if their process dies; a call in flight on a dead caller becomes a
    ``WORKER_FAILED`` outcome, as a dead task's does. Each call is an actor task named
    ``tool:<tool>:<node>``; ``ray.cancel`` on it cancels the call's coroutine in the actor.
    """

    def __init__(
        self,
        catalogue: ToolCatalogue,
        *,
        size: int = 2,
        max_concurrency: int = CALLS_PER_CALLER,
        name_prefix: str = "raydag-tool-caller",
        namespace: str = "raydag",
    ) -> None:
        if size < 1 or max_concurrency < 1:
            raise ValueError("a caller pool needs at least one caller, each allowed at least one call")
        self._catalogue = catalogue
        self._max_concurrency = max_concurrency
        self._names = [f"{name_prefix}-{index}" for index in range(size)]
        self._namespace = namespace
        self._callers: dict[str, Any] = {}
        self._next = itertools.cycle(self._names)

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def start(self) -> None:
        """Start every caller now, in the background, rather than on its first call: a cold caller takes a
        few hundred ms to start, which the first run's calls would otherwise wait for."""
        for name in self._names:
            self._caller(name)

    def _caller(self, name: str) -> Any:
        caller = self._callers.get(name)
        if caller is None:
            import ray

            from actors.tool_caller import ToolCaller

            caller = self._callers[name] = (
                ray.remote(ToolCaller)
                .options(
                    name=name,
                    namespace=self._namespace,
                    get_if_exists=True,
                    num_cpus=0,
                    max_concurrency=self._max_concurrency,
                    max_restarts=-1,
                    max_task_retries=0,  # retries are the supervisor's decision
                )
                .remote()
            )
        return caller

    async def run(self, call: ToolCall) -> ToolOutcome:
        import ray
        from ray.exceptions import ActorDiedError, RayError

        name = next(self._next)
        started = datetime.now(UTC)
        try:
            ref = (
                self._caller(name)
                .call.options(name=f"tool:{call.tool}:{call.node_id}")
                .remote(call, self._catalogue[call.tool])
            )
        except RayError as exc:
            self._callers.pop(name, None)
            return _worker_failed(started, exc)
        try:
            outcome: ToolOutcome = await ref
            return outcome
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except RayError as exc:
            if isinstance(exc, ActorDiedError):  # gone for good (not restarting): the next call makes another
                self._callers.pop(name, None)
            return _worker_failed(started, exc)

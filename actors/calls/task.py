"""The Ray task that performs one tool call. It holds no run state; the supervisor applies its result.

A worker process runs many tool tasks one after another. Their calls share one event loop on a thread of
the worker's own and one ``McpConnections``, so keep-alive connections and the 2026-07-28 client outlive a
single task; each call still carries its own token.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import ray

from actors.calls.call import ToolCall, ToolOutcome
from actors.calls.mcp import McpConnections, call_tool
from actors.observe.tracing import configure_tracing
from dag.contracts import ToolContract

_T = TypeVar("_T")


class _WorkerLoop:
    """An event loop running forever on a daemon thread; the worker's tasks submit coroutines to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="raydag-mcp-client", daemon=True)
        self._thread.start()
        self.connections = self.run(_open_connections())

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result()
        except BaseException:  # ray.cancel interrupts the waiting thread: cancel the call itself too
            future.cancel()
            raise

    def close(self) -> None:
        """Close the connections and the loop. A worker never needs to: its process ends with its loop."""
        self.run(self.connections.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.loop.close()


async def _open_connections() -> McpConnections:
    return McpConnections()  # built inside the loop it will serve


_worker_loop: _WorkerLoop | None = None
_worker_loop_lock = threading.Lock()


def _loop() -> _WorkerLoop:
    global _worker_loop
    with _worker_loop_lock:
        if _worker_loop is None:
            configure_tracing("raydag-tool-worker")
            _worker_loop = _WorkerLoop()
        return _worker_loop


@ray.remote(num_cpus=0.05, max_retries=0)
def execute_tool_call(call: ToolCall, contract: ToolContract) -> ToolOutcome:
    """Fractional CPUs: tool calls wait on I/O, so many share a core. Retries are the supervisor's decision.

    The contract travels with the call so the worker checks the output against the tool's declared model.
    """
    worker = _loop()
    return worker.run(call_tool(call, {contract.name: contract}, worker.connections))

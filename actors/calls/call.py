"""A node's call as it leaves the supervisor and comes back: ``ToolCall`` out, ``ToolOutcome`` in, and the
``ToolExecutor`` interface every way of making calls implements. Plain data: importing it loads neither Ray
nor the MCP SDK (the settings and the run's logic import it)."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from dag.events import NodeError

MODERN_PROTOCOL = "2026-07-28"
"""Stateless: a call is one HTTP request, no handshake. ``"legacy"`` selects the 2025-11-25 handshake."""


@dataclass(frozen=True)
class ToolCall:
    """Everything a worker needs for one call. The token is minted for this call alone."""

    run_id: str
    node_id: str
    attempt: int
    tool: str
    args: dict[str, Any]
    mcp_url: str
    token: str
    timeout_s: float
    protocol: str = MODERN_PROTOCOL
    trace: dict[str, str] = field(default_factory=dict)
    """W3C trace context of the node's span: the call's span, and the MCP request, join the run's trace."""
    server: str | None = None
    """The toolset server to call (its declaration says how); ``None``: ``mcp_url`` with ``token``."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Entries for the request's ``_meta`` (a write's operation id, where its overlay says so)."""


@dataclass(frozen=True)
class ToolOutcome:
    output: Any
    error: NodeError | None
    started_at: datetime
    finished_at: datetime

    @property
    def ok(self) -> bool:
        return self.error is None


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
    SUPERVISOR = "supervisor"
    """The supervisor's own event loop (``InlineExecutor``): no Ray call per tool call, all calls on its core."""

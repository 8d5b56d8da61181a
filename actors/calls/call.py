"""A node's call as it leaves the supervisor and comes back: ``ToolCall`` out, ``ToolOutcome`` in, and the
``ToolExecutor`` interface every way of making calls implements. Plain data: importing it loads neither Ray
nor the MCP SDK (the settings and the run's logic import it)."""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from dag.events import NodeError

MODERN_PROTOCOL = "2026-07-28"
"""Stateless: a call is one HTTP request, no handshake. ``"legacy"`` selects the 2025-11-25 handshake."""


STDIO_SESSION = "stdio:"
"""How a stdio server's task names the process incarnation it lives in (``TaskHandle.session``)."""
HELD_SESSION = "call:"
"""How a plain call a server's question holds open names the process holding it (``TaskHandle.session``,
``actors.calls.mcp.held_calls``): it is followed like a task, and lives and dies with that process."""
TASK_ENDED = frozenset({"completed", "failed", "cancelled"})
"""A task's terminal statuses: its result (or its failure) can be read, and nothing more happens to it."""


@dataclass(frozen=True)
class TaskHandle:
    """An MCP task a call started (``tools/call`` with a ``task``): what following it needs, from any process.

    Recorded in the run's log before anything waits on it (``NodeTaskUpdated``), so that a run resumed by
    another supervisor or caller polls this task instead of calling the tool again. ``session`` is the
    Streamable HTTP session the task lives in (tasks are per session); for a stdio server, the incarnation of
    its process the task lives and dies with (``stdio:<id>``, ``actors.calls.mcp.stdio_tasks``). A plain call
    whose server asked a question mid-call is followed through a handle too: ``task_id`` is the call's own id
    and ``session`` the process holding the call (``call:<id>``, ``actors.calls.mcp.held_calls``).
    """

    server: str
    task_id: str
    status: str
    message: str | None = None
    session: str | None = None
    protocol: str = "2025-11-25"
    poll_s: float = 1.0
    holder: str | None = None
    """The caller actor whose stdio server runs the task (a pool's caller, by name): only it can follow the
    task, so its follows go there (``None``: any process can, or the supervisor's own loop holds it)."""
    question: Mapping[str, Any] | None = None
    """What the task asks while it is ``input_required``: the server's request id, its message and the schema
    of the answer it wants (a form elicitation). Recorded with the task before a person is asked; it goes to
    the run's inbox (``actors.run.tool_questions``), never to the model."""

    @property
    def ended(self) -> bool:
        return self.status in TASK_ENDED

    def json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "task_id": self.task_id,
            "status": self.status,
            "message": self.message,
            "session": self.session,
            "protocol": self.protocol,
            "poll_s": self.poll_s,
            "holder": self.holder,
            "question": dict(self.question) if self.question is not None else None,
        }

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> TaskHandle:
        return cls(
            server=str(value["server"]),
            task_id=str(value["task_id"]),
            status=str(value["status"]),
            message=value.get("message"),
            session=value.get("session"),
            protocol=str(value.get("protocol") or "2025-11-25"),
            poll_s=float(value.get("poll_s") or 1.0),
            holder=value.get("holder"),
            question=value.get("question"),
        )


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
    as_task: bool = False
    """Start the call as an MCP task (its tool's server runs it as one): the outcome is the task's handle."""
    task: TaskHandle | None = None
    """Follow this task instead of calling the tool: the outcome is its result once it ended, or its handle
    again once its status changed (recorded, then followed on)."""
    reply: Mapping[str, Any] | None = None
    """A person's answer to the question ``task`` asks (an elicitation's result: ``action`` and ``content``),
    sent to its server before the task is followed on."""
    stop: bool = False
    """Cancel ``task`` at its server (``tasks/cancel``, after sending ``reply``) instead of following it: the
    outcome is its handle, cancelled."""


@dataclass(frozen=True)
class ToolOutcome:
    output: Any
    error: NodeError | None
    started_at: datetime
    finished_at: datetime
    task: TaskHandle | None = None
    """A task the call started or follows, still running: no output, no error yet (``pending``)."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.task is None

    @property
    def pending(self) -> bool:
        """The call runs on as a task: record ``task`` and follow it."""
        return self.task is not None and self.error is None


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

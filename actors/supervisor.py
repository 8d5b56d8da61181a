"""The RunSupervisor Ray actor: one async actor multiplexes many concurrent runs."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, replace
from typing import Any

import ray

from actors.executor import ExecutorKind, build_executor
from actors.metrics import RayRunMetrics
from actors.service import Cancellation, RunRequest, RunService, SubmitResult
from actors.store.database import create_pool
from actors.store.outbox import LogSink, OutboxSink, WebhookSink
from actors.tracing import configure_tracing
from dag.budget import Budgets
from dag.health import ToolHealth
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.tokens import TaskTokens
from planner import load_planners, unavailable_planners
from planner.openai_planner import OpenAISettings

log = logging.getLogger(__name__)

NAMESPACE = "raydag"


@dataclass(frozen=True)
class SupervisorConfig:
    dsn: str
    mcp_url: str
    token_key: bytes
    limits: Budgets
    pool_size: int = 4
    tenant_tools: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    """Each tenant's tool catalogue (tenant → tool names); ``None`` grants every tool to every tenant."""
    lease_s: float = 15.0
    planners: tuple[str, ...] = ()
    """Planners beyond the built-in ones, as ``package.module:ClassName`` import paths."""
    openai: OpenAISettings | None = None
    """The model planner's settings; ``None`` leaves it unavailable (requests for it are refused)."""
    outbox_webhook_url: str | None = None
    """Where the outbox relay POSTs terminal events; ``None`` logs them."""
    tool_executor: ExecutorKind = ExecutorKind.CALLERS
    """How tool calls run: a Ray task each, or on the supervisor's ``ToolCaller`` actors."""
    tool_callers: int = 2
    """How many ``ToolCaller`` actors the supervisor starts when ``tool_executor`` is ``callers``."""

    def outbox_sink(self) -> OutboxSink:
        return WebhookSink(self.outbox_webhook_url) if self.outbox_webhook_url else LogSink()


class RunSupervisor:
    """Owns runs: validates, authorizes, budgets and records them, and dispatches their nodes (as Ray tasks, or
    to caller actors of its own: ``SupervisorConfig.tool_executor``).

    Its owner name in PostgreSQL is its actor name. When Ray restarts it after a crash, it reclaims its
    unfinished runs at once and resumes them; runs of a supervisor that is gone are taken over when their
    lease lapses.
    """

    def __init__(self, config: SupervisorConfig) -> None:
        configure_tracing("raydag-supervisor")
        self._config = config
        self._owner = ray.get_runtime_context().get_actor_name() or "raydag-supervisor"
        self._service: RunService | None = None
        self._health = ToolHealth()  # tool health is a fact about the tools, shared by every run
        self._lock = asyncio.Lock()
        # Async actors construct on their event loop: start owning runs now, not at the first call, so a
        # restarted supervisor resumes its runs even if nobody calls it.
        self._booting = asyncio.get_running_loop().create_task(self._boot())

    async def _boot(self) -> None:
        try:
            (await self._current()).start_background()
        except Exception:
            log.exception("the supervisor could not start its background work; it will on the next call")

    async def _current(self) -> RunService:
        """The service, built on first use: its pool must live on the actor's own event loop."""
        async with self._lock:
            if self._service is None:
                config = self._config
                # Its connections show in pg_stat_activity under its actor name.
                pool = await create_pool(config.dsn, max_size=config.pool_size, application_name=self._owner)
                self._service = RunService(
                    pool=pool,
                    executor=build_executor(
                        config.tool_executor,
                        CASEOPS_TOOLS,
                        callers=config.tool_callers,
                        name_prefix=f"{self._owner}-tool-caller",
                        namespace=NAMESPACE,
                    ),
                    catalogue=CASEOPS_TOOLS,
                    planners=load_planners(config.planners, config.openai),
                    unavailable_planners=unavailable_planners(config.openai),
                    tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
                    mcp_url=config.mcp_url,
                    limits=config.limits,
                    tenant_tools=dict(config.tenant_tools) if config.tenant_tools is not None else None,
                    health=self._health,
                    owner=self._owner,
                    lease_s=config.lease_s,
                    outbox_sink=config.outbox_sink(),
                    metrics=RayRunMetrics(),
                )
            return self._service

    async def reconfigure(self, config: SupervisorConfig) -> bool:
        """Adopt a redeployment's configuration for what happens next; ``True`` if anything changed.

        A rotated key, a moved MCP server, new limits or tenant catalogues apply from the next call on (a
        run keeps the budgets it was created with). Another database is another supervisor: refused. The tool
        executor stays the one the actor was created with (calls are in flight on it): a supervisor created
        anew (or under another name) takes another.
        """
        service = await self._current()
        async with self._lock:
            running = (self._config.tool_executor, self._config.tool_callers)
            if (config.tool_executor, config.tool_callers) != running:
                log.warning(
                    "supervisor %s keeps its tool executor %s until it is created anew", self._owner, running
                )
                config = replace(config, tool_executor=running[0], tool_callers=running[1])
            if config == self._config:
                return False
            if config.dsn != self._config.dsn:
                raise ValueError(
                    "a supervisor serves one database; deploy another supervisor name for another"
                )
            service.reconfigure(
                tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
                mcp_url=config.mcp_url,
                limits=config.limits,
                tenant_tools=dict(config.tenant_tools) if config.tenant_tools is not None else None,
            )
            self._config = config
            return True

    async def submit(self, request: RunRequest) -> SubmitResult:
        return await (await self._current()).submit(request)

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        return await (await self._current()).wait(run_id, timeout_s)

    async def cancel(self, run_id: str) -> Cancellation:
        return await (await self._current()).cancel(run_id)

    async def ping(self) -> dict[str, Any]:
        """Who answers: the owner name, its process, and its Ray worker (the ``WorkerId`` of its metrics)."""
        service = await self._current()
        return {
            "owner": self._owner,
            "pid": os.getpid(),
            "worker_id": ray.get_runtime_context().get_worker_id(),
            "active_runs": service.active_runs(),
        }

    async def adopt_orphans(self) -> list[str]:
        """Take over orphaned runs now instead of at the next periodic scan (operators and tests)."""
        return await (await self._current()).adopt_orphans()


def get_or_create_supervisor(config: SupervisorConfig, *, name: str, detached: bool) -> Any:
    """The named supervisor actor in namespace ``raydag``, created on first use.

    Async and multiplexed: one actor drives many runs concurrently (``max_concurrency``) without a CPU of
    its own; Ray restarts it if its process dies.
    """
    options: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "get_if_exists": True,
        "num_cpus": 0,
        "max_concurrency": 1000,
        "max_restarts": -1,
        "max_task_retries": 0,
    }
    if detached:
        options["lifetime"] = "detached"
    return ray.remote(RunSupervisor).options(**options).remote(config)

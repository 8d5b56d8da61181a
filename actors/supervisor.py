"""The RunSupervisor Ray actor: one async actor multiplexes many concurrent runs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import ray

from actors.executor import RayToolExecutor
from actors.service import Cancellation, RunRequest, RunService, SubmitResult
from actors.store.database import create_pool
from dag.budget import Budgets
from dag.health import ToolHealth
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.tokens import TaskTokens
from planner import PLANNERS

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


class RunSupervisor:
    """Owns runs: validates, authorizes, budgets and records them, and dispatches their nodes as Ray tasks.

    A new configuration (a redeploy with a rotated key, say) applies to runs created after it; runs already
    going finish with the configuration they started with.
    """

    def __init__(self, config: SupervisorConfig) -> None:
        self._config = config
        self._fresh: RunService | None = None
        self._services: list[RunService] = []
        self._health = ToolHealth()  # tool health is a fact about the tools, shared by every run
        self._lock = asyncio.Lock()

    async def _current(self) -> RunService:
        """The service new runs go to. Built on first use: its pool must live on the actor's own loop."""
        async with self._lock:
            if self._fresh is None:
                config = self._config
                pool = await create_pool(config.dsn, max_size=config.pool_size)
                self._fresh = RunService(
                    pool=pool,
                    executor=RayToolExecutor(CASEOPS_TOOLS),
                    catalogue=CASEOPS_TOOLS,
                    planners={name: planner() for name, planner in PLANNERS.items()},
                    tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
                    mcp_url=config.mcp_url,
                    limits=config.limits,
                    tenant_tools=dict(config.tenant_tools) if config.tenant_tools is not None else None,
                    health=self._health,
                )
                self._services.insert(0, self._fresh)
            return self._fresh

    async def _owner(self, run_id: str) -> RunService:
        for service in self._services:
            if service.drives(run_id):
                return service
        return await self._current()

    async def reconfigure(self, config: SupervisorConfig) -> bool:
        """Adopt ``config`` for runs created from now on; ``True`` if it differed from the current one."""
        async with self._lock:
            if config == self._config:
                return False
            self._config = config
            self._fresh = None
            keep = []
            for service in self._services:
                if service.active_runs():
                    keep.append(service)  # its runs finish with the configuration they started with
                else:
                    await service.close_pool()
            self._services = keep
            return True

    async def submit(self, request: RunRequest) -> SubmitResult:
        return await (await self._current()).submit(request)

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        return await (await self._owner(run_id)).wait(run_id, timeout_s)

    async def cancel(self, run_id: str) -> Cancellation:
        return await (await self._owner(run_id)).cancel(run_id)

    async def ping(self) -> dict[str, Any]:
        await self._current()
        return {"active_runs": sum(service.active_runs() for service in self._services)}


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

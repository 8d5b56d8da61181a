"""The RunSupervisor Ray actor: one async actor multiplexes many concurrent runs."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import ray

from actors.executor import RayToolExecutor
from actors.service import RunRequest, RunService, SubmitResult
from actors.store.database import create_pool
from dag.budget import Budgets
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


class RunSupervisor:
    """Owns runs: validates, authorizes, budgets and records them, and dispatches their nodes as Ray tasks."""

    def __init__(self, config: SupervisorConfig) -> None:
        self._config = config
        self._service: RunService | None = None
        self._starting = asyncio.Lock()

    async def _ready(self) -> RunService:
        # The pool must be created on the actor's own event loop, so it is made on first use.
        async with self._starting:
            if self._service is None:
                config = self._config
                pool = await create_pool(config.dsn, max_size=config.pool_size)
                self._service = RunService(
                    pool=pool,
                    executor=RayToolExecutor(),
                    catalogue=CASEOPS_TOOLS,
                    planners={name: planner() for name, planner in PLANNERS.items()},
                    tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
                    mcp_url=config.mcp_url,
                    limits=config.limits,
                )
            return self._service

    async def submit(self, request: RunRequest) -> SubmitResult:
        return await (await self._ready()).submit(request)

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        return await (await self._ready()).wait(run_id, timeout_s)

    async def ping(self) -> dict[str, Any]:
        service = await self._ready()
        return {"active_runs": service.active_runs()}


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

"""The RunSupervisor Ray actor: one async actor multiplexes many concurrent runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, replace
from typing import Any

import ray

from actors.calls.call import ExecutorKind, ToolExecutor
from actors.calls.exchange import DEFAULT_CALLERS
from actors.calls.executors import CallerPoolExecutor, build_executor
from actors.calls.live_catalogue import LiveCatalogue
from actors.observe.ray_metrics import RayRunMetrics
from actors.observe.tracing import configure_tracing
from actors.run.service import RunService
from actors.run.submission import (
    MAX_ACTIVE_RUNS,
    Cancellation,
    ContinueRequest,
    Drained,
    RunRequest,
    SubmitResult,
)
from actors.store.database import create_pool
from actors.store.outbox import LogSink, OutboxSink, WebhookSink
from actors.toolsets.config import HttpServer, Toolsets, load_toolsets, shipped_toolsets
from dag.budget import Budgets
from dag.contracts import ToolContract
from dag.errors import RaydagError
from dag.health import ToolHealth
from dag.policy import TenantPolicy, policy_of
from dag.tokens import TaskTokens
from planner import load_planners, unavailable_planners
from planner.openai_planner import OpenAISettings

log = logging.getLogger(__name__)

NAMESPACE = "raydag"
FIRST_LISTING_WAIT_S = 1.0
"""How long ``ping`` waits for a new supervisor's first listing of its toolset servers."""


@dataclass(frozen=True)
class SupervisorConfig:
    dsn: str
    mcp_url: str
    token_key: bytes
    limits: Budgets
    pool_size: int = 4
    tenant_tools: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    """Each tenant's tool catalogue (tenant → tool names); ``None`` grants every tool to every tenant."""
    tenant_policies: tuple[tuple[str, TenantPolicy], ...] = ()
    """Each tenant's policy for its people (``RAYDAG_TENANT_POLICY``); a tenant not named gets the default."""
    lease_s: float = 15.0
    planners: tuple[str, ...] = ()
    """Planners beyond the built-in ones, as ``package.module:ClassName`` import paths."""
    openai: OpenAISettings | None = None
    """The model planner's settings; ``None`` leaves it unavailable (requests for it are refused)."""
    outbox_webhook_url: str | None = None
    """Where the outbox relay POSTs terminal events; ``None`` logs them."""
    tool_executor: ExecutorKind = ExecutorKind.CALLERS
    """How tool calls run: on the supervisor's ``ToolCaller`` actors, a Ray task each, or in its own loop."""
    tool_callers: int = DEFAULT_CALLERS
    """How many ``ToolCaller`` actors the supervisor starts when ``tool_executor`` is ``callers``."""
    max_active_runs: int = MAX_ACTIVE_RUNS
    """How many runs it drives at once; the others it owns wait their turn, oldest first."""
    toolsets: Toolsets | str | None = None
    """The MCP servers whose tools runs may use: parsed, or the path of a toolsets file; ``None``: the shipped
    caseops toolset at ``mcp_url``. Load a file before (``load_toolsets``) to fail where a person reads it."""
    relist_every_s: float = 30.0
    """How often every toolset server is listed again, to find a tool changed under the runs pinning it."""

    def policy_of(self, tenant_id: str) -> TenantPolicy:
        """``tenant_id``'s policy: its entry, else the strictest."""
        return policy_of(self.tenant_policies, tenant_id)

    def effective_toolsets(self) -> Toolsets:
        if isinstance(self.toolsets, str):
            return load_toolsets(self.toolsets)
        return self.toolsets if self.toolsets is not None else shipped_toolsets(self.mcp_url)

    def outbox_sink(self) -> OutboxSink:
        return WebhookSink(self.outbox_webhook_url) if self.outbox_webhook_url else LogSink()


SUBMIT_RELIST_WAIT_S = 1.0
"""How long a submission waits for a fresh listing of servers not listed yet (within the API's deadline)."""


class HandingOver(RaydagError):
    """The supervisor is handing its runs over before its process stops; it takes no new ones."""


class RunSupervisor:
    """Owns runs: validates, authorizes, budgets and records them, and dispatches their nodes (to caller actors of
    its own, as Ray tasks, or calling the tools itself: ``SupervisorConfig.tool_executor``).

    Its owner name in PostgreSQL is its actor name. When Ray restarts it after a crash, it reclaims its
    unfinished runs at once and resumes them; runs of a supervisor that is gone are taken over when their
    lease lapses.
    """

    def __init__(self, config: SupervisorConfig) -> None:
        configure_tracing("raydag-supervisor")
        self._config = config
        self._owner = ray.get_runtime_context().get_actor_name() or "raydag-supervisor"
        self._service: RunService | None = None
        self._executor: ToolExecutor | None = None
        self._catalogue = LiveCatalogue(config.effective_toolsets(), token_for=self._listing_token)
        self._listing: asyncio.Task[None] | None = None
        self._health = ToolHealth()  # tool health is a fact about the tools, shared by every run
        self._lock = asyncio.Lock()
        # Async actors construct on their event loop: start owning runs now, not at the first call, so a
        # restarted supervisor resumes its runs even if nobody calls it.
        self._booting = asyncio.get_running_loop().create_task(self._boot())

    def _listing_token(self, spec: HttpServer) -> str:
        """A token to list a ``raydag-token`` server with: the supervisor's own, for no run."""
        tools = sorted(spec.tools)
        return TaskTokens(key=self._config.token_key, audience=spec.url).mint(
            subject=self._owner,
            tenant_id="raydag",
            task_id=f"discovery/{spec.name}",
            resource={},
            tool=tools[0],
            scopes={overlay.scope for overlay in spec.tools.values()},
        )

    async def _boot(self) -> None:
        # Listing never holds the start up: an unreachable server is retried in the background.
        self._listing = asyncio.get_running_loop().create_task(
            self._catalogue.keep_listed(self._config.relist_every_s), name="keep-toolsets-listed"
        )
        try:
            (await self._current()).start_background()
        except Exception:
            log.exception("the supervisor could not start its background work; it will on the next call")
            return
        try:  # ready when its tool callers are: the first run's calls then start together
            if isinstance(self._executor, CallerPoolExecutor):
                await self._executor.ready()
        except Exception:
            log.exception("the supervisor's tool callers did not start; calls will wait for them")

    async def _current(self) -> RunService:
        """The service, built on first use: its pool must live on the actor's own event loop."""
        async with self._lock:
            if self._service is None:
                config = self._config
                # Its connections show in pg_stat_activity under its actor name.
                pool = await create_pool(config.dsn, max_size=config.pool_size, application_name=self._owner)
                self._executor = build_executor(
                    config.tool_executor,
                    self._catalogue.contracts,
                    callers=config.tool_callers,
                    name_prefix=f"{self._owner}-tool-caller",
                    namespace=NAMESPACE,
                    servers=self._catalogue.servers,
                )
                planners = load_planners((*self._toolset_planners(), *config.planners), config.openai)
                toolset_planner = next(
                    (
                        name
                        for name, planner in planners.items()
                        if _path_of(planner) in self._toolset_planners()
                    ),
                    None,
                )
                self._service = RunService(
                    pool=pool,
                    executor=self._executor,
                    catalogue=self._catalogue.contracts,
                    servers={spec.name: spec for spec in self._catalogue.servers},
                    withdrawn=self._catalogue.withdrawn,
                    pins=self._catalogue.pins,
                    listed=self._catalogue.first_attempt,
                    planners=planners,
                    toolset_planner=toolset_planner,
                    unavailable_planners=unavailable_planners(config.openai),
                    tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
                    mcp_url=config.mcp_url,
                    limits=config.limits,
                    tenant_tools=dict(config.tenant_tools) if config.tenant_tools is not None else None,
                    tenant_policies=dict(config.tenant_policies),
                    health=self._health,
                    owner=self._owner,
                    lease_s=config.lease_s,
                    outbox_sink=config.outbox_sink(),
                    metrics=RayRunMetrics(),
                    toolsets=self._catalogue.toolsets,
                    max_active_runs=config.max_active_runs,
                )
            return self._service

    def _toolset_planners(self) -> tuple[str, ...]:
        """The toolsets' own planner, as the toolsets file names it (at most one)."""
        declared = self._catalogue.toolsets.planner
        return (declared,) if declared is not None else ()

    async def reconfigure(self, config: SupervisorConfig) -> bool:
        """Adopt a redeployment's configuration for what happens next; ``True`` if anything changed.

        A rotated key, a moved MCP server, new limits or tenant catalogues apply from the next call on (a
        run keeps the budgets it was created with). Another database is another supervisor: refused. The tool
        executor stays the one the actor was created with (calls are in flight on it), and so do its toolsets
        (their servers' URLs included: the definitions its runs pinned are theirs): a supervisor created
        anew (or under another name) takes others.
        """
        service = await self._current()
        async with self._lock:
            running = (self._config.tool_executor, self._config.tool_callers)
            if (config.tool_executor, config.tool_callers) != running:
                log.warning(
                    "supervisor %s keeps its tool executor %s until it is created anew", self._owner, running
                )
                config = replace(config, tool_executor=running[0], tool_callers=running[1])
            if config.toolsets != self._config.toolsets:
                log.warning("supervisor %s keeps the toolsets it was created with", self._owner)
                config = replace(config, toolsets=self._config.toolsets)
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
                tenant_policies=dict(config.tenant_policies),
            )
            self._config = config
            return True

    async def submit(self, request: RunRequest) -> SubmitResult:
        service = await self._current()
        await self._offering()
        return await service.submit(request)

    async def continue_run(self, request: ContinueRequest) -> SubmitResult:
        """Continue a run that stopped (``RunService.continue_run``)."""
        service = await self._current()
        await self._offering()
        return await service.continue_run(request)

    async def _offering(self) -> None:
        """Before a run is admitted: each server has been tried once (bounded by its connect timeout), so the
        run sees what is offered, and one that was unreachable is tried once more (a server that came up since
        — the one a stopped run is continued for — is offered at once)."""
        await self._catalogue.first_attempt.wait()
        if self._catalogue.unreachable:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._catalogue.retry_unlisted(), SUBMIT_RELIST_WAIT_S)

    async def contracts(self) -> dict[str, ToolContract]:
        """The tools offered now, by name (the API's and the CLI's views read recording modes from them)."""
        await self._catalogue.first_attempt.wait()
        return dict(self._catalogue.contracts)

    async def toolsets(self) -> dict[str, Any]:
        """Each toolset server's state: listed, unreachable (and why), or changed since pinned (and how);
        once each server has been tried."""
        await self._catalogue.first_attempt.wait()
        return self._catalogue.status()

    async def relist(self) -> dict[str, Any]:
        """List every toolset server again now, instead of at the next periodic listing (operators and tests)."""
        await self._catalogue.refresh()
        return self._catalogue.status()

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        return await (await self._current()).wait(run_id, timeout_s)

    async def cancel(self, run_id: str) -> Cancellation:
        return await (await self._current()).cancel(run_id)

    async def ping(self) -> dict[str, Any]:
        """Who answers: the owner name, its process, and its Ray worker (the ``WorkerId`` of its metrics).
        ``HandingOver`` once it drains: it is not ready for runs any more (``/readyz`` answers 503)."""
        service = await self._current()
        # Ready means warm: the callers are up. Shielded: a caller that gives up on this ping (a readiness
        # check's timeout) must not cancel the boot itself, or no ping would ever answer again.
        await asyncio.shield(self._booting)
        if service.handing_over:
            raise HandingOver(self._owner)
        # A supervisor just created is listing its servers (a local one answers in milliseconds): report
        # what that found rather than "not listed yet", unless it takes longer than a readiness check may.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._catalogue.first_attempt.wait(), FIRST_LISTING_WAIT_S)
        return {
            "owner": self._owner,
            "pid": os.getpid(),
            "worker_id": ray.get_runtime_context().get_worker_id(),
            "active_runs": service.active_runs(),
            "toolsets": self._catalogue.status(),
        }

    async def drain(self, grace_s: float = 10.0) -> Drained:
        """Before the process stops: refuse new runs, let the calls in flight land for up to ``grace_s``,
        record them, and stop driving every run without ending it (``RunService.drain``)."""
        return await (await self._current()).drain(grace_s)

    async def adopt_orphans(self) -> list[str]:
        """Take over orphaned runs now instead of at the next periodic scan (operators and tests)."""
        service = await self._current()
        await self._catalogue.first_attempt.wait()
        return await service.adopt_orphans()


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


def _path_of(planner: object) -> str:
    return f"{type(planner).__module__}:{type(planner).__qualname__}"

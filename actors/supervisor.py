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
from actors.calls.executors import PlacedCallers, build_executor
from actors.calls.live_catalogue import LiveCatalogue
from actors.calls.mcp.discovery import ServerUnreachable, discover
from actors.calls.placement import ANYWHERE, spread
from actors.observe.ray_metrics import RayRunMetrics
from actors.observe.tracing import configure_tracing
from actors.run.deps import RunDeps, ToolEndpoint
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
from actors.store.decisions import DecisionWakeups
from actors.store.outbox import LogSink, OutboxSink, WebhookSink
from actors.toolsets.config import HttpServer, StdioServer, Toolsets, load_toolsets
from actors.toolsets.listing import ServerListing
from dag.agents import AGENT_DEPTH_LIMIT
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
    """The most of each budget a request may ask for."""
    toolsets: Toolsets | str
    """The MCP servers whose tools runs may use: parsed, or the path of a toolsets file (load a file before,
    ``load_toolsets``, to fail where a person reads it). Which ones a deployment serves is decided where it
    is composed (``actors.launch``)."""
    defaults: Budgets | None = None
    """What a run gets of each budget it does not ask for (a tenant's policy may say otherwise); ``None``:
    the limits."""
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
    agent_depth: int = AGENT_DEPTH_LIMIT
    """How deep agent nodes' child runs may nest (``RAYDAG_AGENT_DEPTH``; 0: no agent node runs)."""
    relist_every_s: float = 30.0
    """How often every toolset server is listed again, to find a tool changed under the runs pinning it."""

    def policy_of(self, tenant_id: str) -> TenantPolicy:
        """``tenant_id``'s policy: its entry, else the strictest."""
        return policy_of(self.tenant_policies, tenant_id)

    def effective_toolsets(self) -> Toolsets:
        return load_toolsets(self.toolsets) if isinstance(self.toolsets, str) else self.toolsets

    def outbox_sink(self) -> OutboxSink:
        return WebhookSink(self.outbox_webhook_url) if self.outbox_webhook_url else LogSink()


PLACED_CALLER_START_S = 15.0
"""How much longer than its connect timeout a placed server's first listing waits: for its caller's process to
start on a node that offers the resources it names."""
SUBMIT_RELIST_WAIT_S = 1.0
"""How long after a fresh listing of servers not listed yet began a submission stops waiting for it (within the
API's deadline): one that began a second ago and has not answered costs later submissions nothing."""


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
        self._catalogue = LiveCatalogue(config.effective_toolsets(), lister=self._list)
        self._listing: asyncio.Task[None] | None = None
        self._health = ToolHealth()  # tool health is a fact about the tools, shared by every run
        self._lock = asyncio.Lock()
        # Async actors construct on their event loop: start owning runs now, not at the first call, so a
        # restarted supervisor resumes its runs even if nobody calls it.
        self._booting = asyncio.get_running_loop().create_task(self._boot())

    async def _list(self, spec: HttpServer | StdioServer) -> ServerListing:
        """What ``spec``'s server lists now: asked here, or — for a server placed on some nodes only — by one of
        its callers there (a stdio server's command may exist only on those nodes)."""
        executor = self._tool_executor()
        if not (isinstance(executor, PlacedCallers) and executor.placed(spec.name)):
            return await discover(spec, token_for=self._listing_token)
        token = (
            self._listing_token(spec)
            if isinstance(spec, HttpServer) and spec.auth.mode == "raydag-token"
            else None
        )
        assert spec.placement is not None, "a placed server names its placement"
        patience = spec.timeouts.connect_s + PLACED_CALLER_START_S
        try:
            return await asyncio.wait_for(executor.list_tools(spec.name, token), patience)
        except TimeoutError:
            wanted = sorted(spec.placement.resources)
            reason = f"no caller on a node offering {wanted} answered within {patience:g}s"
            raise ServerUnreachable(spec.name, reason) from None
        except ServerUnreachable:
            raise
        except ray.exceptions.RayError as exc:
            raise ServerUnreachable(spec.name, f"its caller failed: {type(exc).__name__}") from None

    def _tool_executor(self) -> ToolExecutor:
        """How this supervisor's calls run (``SupervisorConfig.tool_executor``), built on first use, on the
        actor's event loop."""
        if self._executor is None:
            self._executor = build_executor(
                self._config.tool_executor,
                self._catalogue.contracts,
                callers=self._config.tool_callers,
                name_prefix=f"{self._owner}-tool-caller",
                namespace=NAMESPACE,
                servers=self._catalogue.servers,
            )
        return self._executor

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
            if isinstance(self._executor, PlacedCallers):
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
                planners = load_planners((*self._toolset_planners(), *config.planners), config.openai)
                toolset_planner = next(
                    (
                        name
                        for name, planner in planners.items()
                        if _path_of(planner) in self._toolset_planners()
                    ),
                    None,
                )
                deps = RunDeps(
                    executor=self._tool_executor(),
                    catalogue=self._catalogue.contracts,
                    planners=planners,
                    endpoint=ToolEndpoint(
                        url=config.mcp_url, tokens=TaskTokens(key=config.token_key, audience=config.mcp_url)
                    ),
                    servers={spec.name: spec for spec in self._catalogue.servers},
                    withdrawn=self._catalogue.withdrawn,
                    pins=self._catalogue.pins,
                    health=self._health,
                    metrics=RayRunMetrics(),
                    agent_depth=config.agent_depth,
                )
                self._service = RunService(
                    deps,
                    pool=pool,
                    listed=self._catalogue.first_attempt,
                    toolset_planner=toolset_planner,
                    unavailable_planners=unavailable_planners(config.openai),
                    limits=config.limits,
                    defaults=config.defaults,
                    tenant_tools=dict(config.tenant_tools) if config.tenant_tools is not None else None,
                    tenant_policies=dict(config.tenant_policies),
                    owner=self._owner,
                    lease_s=config.lease_s,
                    outbox_sink=config.outbox_sink(),
                    toolsets=self._catalogue.toolsets,
                    max_active_runs=config.max_active_runs,
                    # One more connection, listening: a person's decision wakes the run waiting on it.
                    decisions=DecisionWakeups(config.dsn, application_name=f"{self._owner}:decisions"),
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
                defaults=config.defaults,
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
            await self._catalogue.retry_unlisted(within_s=SUBMIT_RELIST_WAIT_S)

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

    async def wait(self, run_id: str, timeout_s: float, until_waiting: bool = False) -> bool:
        return await (await self._current()).wait(run_id, timeout_s, until_waiting=until_waiting)

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
            "node_id": ray.get_runtime_context().get_node_id(),
            "active_runs": service.active_runs(),
            "waiting_runs": service.waiting_runs(),  # of those, the ones waiting for a turn to be driven
            "toolsets": self._catalogue.status(),
        }

    async def callers(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """Each of its caller actors, by name, as it answers ``ping`` (its node and process among it), or why it
        did not within ``timeout_s``; none when calls run as tasks or in this process."""
        executor = self._tool_executor()
        if not isinstance(executor, PlacedCallers):
            return {}
        handles = executor.handles()

        async def ping(handle: Any) -> Any:
            try:
                return await asyncio.wait_for(handle.ping.remote(), timeout_s)
            except (TimeoutError, ray.exceptions.RayError) as exc:
                return {"error": type(exc).__name__}

        answers = await asyncio.gather(*(ping(handle) for handle in handles.values()))
        return dict(zip(handles, answers, strict=True))

    async def drain(self, grace_s: float = 10.0) -> Drained:
        """Before the process stops: refuse new runs, let the calls in flight land for up to ``grace_s``,
        record them, and stop driving every run without ending it (``RunService.drain``)."""
        return await (await self._current()).drain(grace_s)

    async def adopt_orphans(self) -> list[str]:
        """Take over orphaned runs now instead of at the next periodic scan (operators and tests)."""
        service = await self._current()
        await self._catalogue.first_attempt.wait()
        return await service.adopt_orphans()


def supervisor_names(name: str, count: int) -> tuple[str, ...]:
    """The names of a deployment's ``count`` supervisors: ``name``, then ``name-1`` … ``name-(count-1)`` (one
    supervisor keeps the name it always had, so its runs are its own again after an upgrade)."""
    if count < 1:
        raise ValueError("a deployment needs at least one supervisor")
    return (name, *(f"{name}-{index}" for index in range(1, count)))


def get_or_create_supervisor(
    config: SupervisorConfig, *, name: str, detached: bool, spread_at: tuple[int, int] | None = None
) -> Any:
    """The named supervisor actor in namespace ``raydag``, created on first use.

    Async and multiplexed: one actor drives many runs concurrently (``max_concurrency``) without a CPU of
    its own; Ray restarts it if its process dies. ``spread_at`` = (its index, how many the deployment has): the
    i-th of a deployment's supervisors prefers the i-th of the cluster's live nodes (``placement.spread``),
    softly, so a supervisor whose node is gone starts elsewhere.
    """
    placement = spread(*spread_at) if spread_at is not None else ANYWHERE
    options: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "get_if_exists": True,
        "max_concurrency": 1000,
        "max_restarts": -1,
        "max_task_retries": 0,
        **placement.options(),
    }
    if detached:
        options["lifetime"] = "detached"
    return ray.remote(RunSupervisor).options(**options).remote(config)


def _path_of(planner: object) -> str:
    return f"{type(planner).__module__}:{type(planner).__qualname__}"

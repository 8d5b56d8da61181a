"""Bring up everything a run needs on one machine: database, migrations, the hosted tool server (if the
toolsets declare one and ``RAYDAG_MCP_URL`` names none), Ray, supervisor."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.launch.background_server import BackgroundServer
from actors.launch.hosting import MCP_PATH, HostedServer, hosted
from actors.launch.settings import ConfigurationError, Settings
from actors.launch.shutdown import become_subreaper, catch_stop_signals, stop_descendants
from actors.observe.tracing import configure_tracing
from actors.run.submission import Drained
from actors.store.database import DatabaseUnreachable, embedded_postgres, reach
from actors.store.setup import prepare_database
from actors.supervisor import NAMESPACE, SupervisorConfig, get_or_create_supervisor, supervisor_names
from actors.toolsets.config import Toolsets, load_toolsets
from dag.tokens import TaskTokens

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    dsn: str
    mcp_url: str
    token_key: bytes
    supervisors: tuple[Any, ...]
    """This process's supervisors (``RAYDAG_SUPERVISORS``): new runs go to each in turn."""
    tool_server: HostedServer | None
    toolsets: Toolsets
    _turns: Iterator[Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_turns", itertools.cycle(self.supervisors))

    @property
    def supervisor(self) -> Any:
        """The first supervisor: what any of them answers alike (the tools offered, whether a run ended)."""
        return self.supervisors[0]

    def next_supervisor(self) -> Any:
        """The supervisor a new run goes to: each in turn."""
        return next(self._turns)

    def in_turn(self) -> list[Any]:
        """Every supervisor once, the next in turn first: where to ask again when one is unavailable."""
        first = self.next_supervisor()
        start = self.supervisors.index(first)
        return [*self.supervisors[start:], *self.supervisors[:start]]


@contextmanager
def database(settings: Settings) -> Iterator[str]:
    """The DSN of ``RAYDAG_DATABASE_URL``, once it answers a connection (a ``ConfigurationError`` naming the
    variable and the reason otherwise, before anything else is started); or of the embedded server (stopped
    again on exit)."""
    if settings.database_url is not None:
        dsn = settings.database_url.get_secret_value()
        try:
            reach(dsn)
        except DatabaseUnreachable as exc:
            raise ConfigurationError(f"RAYDAG_DATABASE_URL: {exc}") from None
        yield dsn
    else:
        with embedded_postgres(settings.home_dir) as dsn:
            yield dsn


def init_ray(*, dashboard: bool = False, setup_hook: str | None = None) -> None:
    """Join the cluster named by ``RAY_ADDRESS`` (as ``ray job submit`` sets it), else start a local Ray.

    ``setup_hook`` is a ``worker_process_setup_hook`` for this job's Ray workers."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address=os.environ.get("RAY_ADDRESS") or "local",
        namespace=NAMESPACE,
        include_dashboard=dashboard,
        logging_level=logging.WARNING,
        log_to_driver=True,
        runtime_env={"worker_process_setup_hook": setup_hook} if setup_hook else None,
    )
    catch_stop_signals()  # ray.init replaced the SIGTERM handler: SIGTERM stops this program as Ctrl-C does


@contextmanager
def local_ray(*, dashboard: bool = False, setup_hook: str | None = None) -> Iterator[None]:
    """``init_ray`` for the block; afterwards ``ray.shutdown()``, and every process the Ray started is gone.

    ``ray.shutdown()`` stops the raylet and the GCS of a Ray this process started, but the raylet's own
    children (the dashboard and runtime-env agents, idle workers) only notice later, 40 s or more on a busy
    machine. As their subreaper this process still has them as descendants, and stops them. A cluster this
    process joined (``RAY_ADDRESS``) has no processes below it: nothing of it is stopped.
    """
    import ray

    if ray.is_initialized():  # the program's own Ray (a script that called ray.init): not ours to stop
        yield
        return
    become_subreaper()
    init_ray(dashboard=dashboard, setup_hook=setup_hook)
    try:
        yield
    finally:
        ray.shutdown()
        killed = stop_descendants()
        if killed:
            log.warning("processes of the local Ray outlived ray.shutdown() and were killed: %s", killed)


@contextmanager
def local_runtime(
    settings: Settings,
    *,
    demo_seed: bool = False,
    dashboard: bool = False,
    toolsets: Toolsets | str | Path | None = None,
) -> Iterator[Runtime]:
    """Everything a run needs, torn down in reverse on exit: nothing it started is left running.

    Without ``RAYDAG_MCP_URL`` the toolsets' hosted server (``hosting.server``), if they declare one, runs in
    this process on a free loopback port; ``demo_seed`` loads its demo data first. Interrupted (SIGINT,
    SIGTERM), the supervisor first hands its runs over, so that they are resumed, not lost. ``toolsets``
    (parsed, or a file's path, whose ``${RAYDAG_MCP_URL}`` is that tool server) replaces ``RAYDAG_TOOLSETS``.
    A Ray already initialized in this process is used, and left running.
    """
    with ExitStack() as stack:
        dsn = stack.enter_context(database(settings))
        hosting = hosted(_declared(settings, toolsets, PLACEHOLDER_URL))
        hosts = hosting is not None and hosting.serves and not settings.mcp_url
        seeding = hosting.seed if hosting is not None and demo_seed else None
        asyncio.run(
            prepare_database(
                dsn,
                schemas=hosting.schemas if hosting is not None and (hosts or seeding) else (),
                seed=(lambda connection: seeding(connection, None)) if seeding is not None else None,
            )
        )
        token_key = settings.task_token_key()
        tool_server: HostedServer | None = None
        if hosts:
            assert hosting is not None
            http = BackgroundServer(host="127.0.0.1")
            mcp_url = http.url + MCP_PATH
            configure_tracing("raydag-mcp")  # this process hosts the tool server
            tool_server = hosting.server(
                dsn=dsn,
                tokens=TaskTokens(key=token_key, audience=mcp_url),
                latency_ms=settings.tool_latency_ms,
                pool_size=settings.db_pool_size,
            )
            http.start(tool_server.asgi_app())
            stack.callback(http.stop)
        else:
            mcp_url = settings.mcp_url or ""
        stack.enter_context(local_ray(dashboard=dashboard))
        declared = _declared(settings, toolsets, mcp_url)
        config = supervisor_config(settings, dsn=dsn, mcp_url=mcp_url, token_key=token_key, toolsets=declared)
        names = supervisor_names(f"{settings.supervisor_name}-cli-{os.getpid()}", settings.supervisors)
        supervisors = tuple(
            get_or_create_supervisor(config, name=name, detached=False, spread_at=(index, len(names)))
            for index, name in enumerate(names)
        )
        for supervisor in supervisors:
            stack.callback(_kill, supervisor)
        import ray

        # Up and warm: the first run's independent calls start together.
        ray.get([supervisor.ping.remote() for supervisor in supervisors])
        try:
            yield Runtime(settings, dsn, mcp_url, token_key, supervisors, tool_server, declared)
        except KeyboardInterrupt:  # SIGINT or SIGTERM (actors.launch.shutdown)
            hand_over_all(supervisors, settings.stop_grace_s)  # while the tool server is still up
            raise


def supervisor_config(
    settings: Settings, *, dsn: str, mcp_url: str, token_key: bytes, toolsets: Toolsets
) -> SupervisorConfig:
    """The supervisor's configuration, derived from the settings in this one place (the API's too)."""
    return SupervisorConfig(
        dsn=dsn,
        mcp_url=mcp_url,
        token_key=token_key,
        limits=settings.limits,
        defaults=settings.defaults,
        pool_size=settings.db_pool_size,
        tenant_tools=settings.tenant_tool_grants(),
        tenant_policies=settings.tenant_policies(),
        lease_s=settings.lease_s,
        planners=settings.planner_paths(),
        openai=settings.openai_settings(),
        outbox_webhook_url=settings.outbox_webhook_url,
        tool_executor=settings.tool_executor,
        tool_callers=settings.tool_callers,
        max_active_runs=settings.max_active_runs,
        agent_depth=settings.agent_depth,
        toolsets=toolsets,
    )


PLACEHOLDER_URL = "http://127.0.0.1/mcp"
"""What ``${RAYDAG_MCP_URL}`` stands for while the toolsets are read only to learn what they host."""


def _declared(settings: Settings, toolsets: Toolsets | str | Path | None, mcp_url: str) -> Toolsets:
    if isinstance(toolsets, str | Path):
        return load_toolsets(toolsets, {**os.environ, "RAYDAG_MCP_URL": mcp_url})
    return toolsets if toolsets is not None else settings.toolset_declarations(mcp_url)


def hand_over(supervisor: Any, grace_s: float) -> Drained | None:
    """Have ``supervisor`` refuse new runs, let its tool calls in flight land (``grace_s`` at most) and be
    recorded, then stop driving its runs without ending them: a supervisor of the same name resumes them at
    once, any other when their leases lapse. ``None`` (and a warning) if it could not."""
    import ray

    try:
        drained: Drained = ray.get(supervisor.drain.remote(grace_s), timeout=grace_s + 15)
    except ray.exceptions.RayError as exc:
        log.warning("the supervisor did not hand its runs over: %s", exc)
        return None
    return drained


def hand_over_all(supervisors: Sequence[Any], grace_s: float) -> None:
    """``hand_over`` by every supervisor at once: the grace period is spent once, not once each."""
    with ThreadPoolExecutor(max(1, len(supervisors))) as pool:
        list(pool.map(lambda supervisor: hand_over(supervisor, grace_s), supervisors))


def _kill(actor: Any) -> None:
    import ray

    ray.kill(actor, no_restart=True)

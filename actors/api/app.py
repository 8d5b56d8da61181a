"""The run API: FastAPI behind Ray Serve, with the toolsets' hosted MCP server (caseops') at ``/mcp`` when they
host one.

``create_app(config)`` builds the ASGI app (uvicorn can serve it directly); ``RunAPI`` is the Serve
deployment around it; ``app`` builds what ``serve run serve_app:app`` starts, configured from ``RAYDAG_*``.

``ToolAPI`` is the MCP server as a Serve deployment of its own, and ``layout`` the two applications it makes
with the API (``tools_mounted=False``) behind one proxy: the API at ``/``, the tool server at ``/mcp``. It is
not the default: measured side by side it costs more CPU per run than the mounted server on two cores
(docs/BENCHMARKS.md, "Load through Serve", arm "own Serve app").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from fastapi import FastAPI
from ray import serve
from ray.serve import Application, Deployment
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from actors.api import (
    RequestDeadline,
    RequestGuard,
    decisions,
    health,
    install_problem_handlers,
    operations,
    questions,
    reviews,
    runs,
    tool_questions,
    viewer,
)
from actors.api.dependencies import ApiState
from actors.api.runs import MAX_WAIT_SECONDS
from actors.api.supervisors import Supervisors
from actors.launch.hosting import (
    LOOPBACK_HOSTS,
    LOOPBACK_ORIGINS,
    MCP_PATH,
    HostedServer,
    hosted,
    hosted_server_of,
)
from actors.launch.local import database, supervisor_config
from actors.launch.ports import refuse_shared_listener
from actors.launch.settings import ApiKeyGrant, Settings, load_settings
from actors.observe.tracing import configure_tracing
from actors.store.database import create_pool
from actors.store.setup import prepare_database
from actors.supervisor import SupervisorConfig, get_or_create_supervisor, supervisor_names
from actors.toolsets.config import Toolsets
from dag.tokens import TaskTokens

APPLICATION_NAME = "raydag-api"
"""The Serve deployment's name, and how its database connections appear in ``pg_stat_activity``."""
TOOLS_NAME = "raydag-mcp"
"""The tool server's Serve application and deployment in ``layout``."""


@dataclass(frozen=True)
class ApiConfig:
    """The API's configuration: the supervisor's, which the settings are turned into in one place
    (``actors.launch.local.supervisor_config``), and what only the API has."""

    supervisor: SupervisorConfig
    api_keys: dict[str, ApiKeyGrant]
    supervisor_name: str
    supervisors: int = 1
    """How many supervisors share the deployment's runs (``RAYDAG_SUPERVISORS``): new runs go to each in turn."""
    tool_latency_ms: int = 0
    max_body_bytes: int = 2 * 1024 * 1024
    mcp_allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    mcp_allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS

    @property
    def dsn(self) -> str:
        return self.supervisor.dsn

    @property
    def pool_size(self) -> int:
        return self.supervisor.pool_size

    @property
    def supervisor_names(self) -> tuple[str, ...]:
        return supervisor_names(self.supervisor_name, self.supervisors)

    @classmethod
    def from_settings(cls, settings: Settings, dsn: str) -> ApiConfig:
        hosts, origins = settings.mcp_hosts() or (LOOPBACK_HOSTS, LOOPBACK_ORIGINS)
        mcp_url = settings.mcp_url or f"http://{settings.host}:{settings.port}{MCP_PATH}"
        return cls(
            supervisor=supervisor_config(
                settings,
                dsn=dsn,
                mcp_url=mcp_url,
                token_key=settings.task_token_key(),
                toolsets=settings.toolset_declarations(mcp_url),
            ),
            api_keys=settings.api_key_grants(),
            supervisor_name=settings.supervisor_name,
            supervisors=settings.supervisors,
            tool_latency_ms=settings.tool_latency_ms,
            mcp_allowed_hosts=hosts,
            mcp_allowed_origins=origins,
        )


def tool_server_for(config: ApiConfig, toolsets: Toolsets) -> HostedServer | None:
    """The server ``toolsets`` have raydag host (``hosting.server``), its task tokens minted for the
    supervisor's ``mcp_url``; ``None`` when they host none."""
    hosting = hosted_server_of(toolsets)
    if hosting is None:
        return None
    supervisor = config.supervisor
    return hosting.server(
        dsn=supervisor.dsn,
        tokens=TaskTokens(key=supervisor.token_key, audience=supervisor.mcp_url),
        latency_ms=config.tool_latency_ms,
        pool_size=supervisor.pool_size,
        allowed_hosts=config.mcp_allowed_hosts,
        allowed_origins=config.mcp_allowed_origins,
    )


def create_app(config: ApiConfig, *, tools_mounted: bool = True) -> FastAPI:
    """The API's ASGI app: the configuration as the routes' state (opened by the lifespan), the middleware,
    the problem handlers and the routers. Nothing here answers a request."""
    configure_tracing("raydag-api")
    toolsets = config.supervisor.effective_toolsets()
    hosting = hosted(toolsets)
    tool_server = tool_server_for(config, toolsets) if tools_mounted else None
    state = ApiState(
        api_keys=config.api_keys, declared=toolsets.scopes, policy_of=config.supervisor.policy_of
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        schemas = hosting.schemas if hosting is not None and tool_server is not None else ()
        await prepare_database(config.dsn, schemas=schemas)
        pool = await create_pool(config.dsn, max_size=config.pool_size, application_name=APPLICATION_NAME)
        supervisors = Supervisors(
            {
                name: get_or_create_supervisor(
                    config.supervisor,
                    name=name,
                    detached=True,
                    spread_at=(index, len(config.supervisor_names)),
                )
                for index, name in enumerate(config.supervisor_names)
            }
        )
        state.open(pool, supervisors)
        # A supervisor that outlived an earlier deployment adopts this one's configuration for new runs.
        await asyncio.gather(
            *(handle.reconfigure.remote(config.supervisor) for _, handle in supervisors.all())
        )
        try:
            async with tool_server.lifespan() if tool_server else contextlib.nullcontext():
                yield
        finally:
            await pool.close()

    # No /docs or /redoc: Swagger UI and ReDoc run script from a CDN inside the API's origin (where the run
    # viewer holds API keys), which no useful CSP can allow safely. /openapi.json serves any such tool elsewhere.
    app = FastAPI(title="raydag", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.api = state
    app.add_middleware(RequestDeadline)
    app.add_middleware(RequestGuard, max_bytes=config.max_body_bytes, opaque_paths=(MCP_PATH,))
    if tool_server is not None:
        # A route, not a mount: the MCP app sees the path /mcp unchanged, and other paths stay FastAPI's 404s.
        app.router.routes.append(
            Route(MCP_PATH, endpoint=tool_server.asgi, methods=["GET", "POST", "DELETE"])
        )
        app.state.tool_server = tool_server
    install_problem_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    return app


ROUTERS = (
    health.router,
    runs.router,
    decisions.router,
    operations.router,
    reviews.router,
    questions.router,
    tool_questions.router,
    viewer.router,
)
"""Every route of the API, by the noun it serves: health, runs (and their nodes and events), the inbox of
decisions, a run's operations, plan reviews, planners' and tools' questions (each decided through
``actors.run.approvals``), and
the run viewer (its page, ``/edges``, ``/stream``)."""


@dataclass(frozen=True)
class Scaling:
    """How many replicas of the API (and of the tool server's application, in ``layout``): a fixed count, or
    autoscaling from ``replicas`` up to ``max_replicas``.

    Each API replica holds up to ``2 × RAYDAG_DB_POOL_SIZE`` database connections (the API's pool and the
    mounted MCP server's; one pool with ``tools_mounted=False``, and one per ``ToolAPI`` replica): see
    docs/DEPLOY.md for the sum against PostgreSQL's ``max_connections``.
    """

    replicas: int = 1
    max_replicas: int | None = None
    target_ongoing_requests: int = 32
    """Autoscaling adds a replica when each has more requests than this in flight (waiting runs included)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> Scaling:
        return cls(replicas=settings.replicas, max_replicas=settings.max_replicas)

    def deployment_options(self) -> dict[str, Any]:
        if self.max_replicas is None or self.max_replicas == self.replicas:
            return {"num_replicas": self.replicas}
        return {
            "autoscaling_config": {
                "min_replicas": self.replicas,
                "max_replicas": self.max_replicas,
                "target_ongoing_requests": self.target_ongoing_requests,
            }
        }


HEAD_NODE_RESOURCE = "node:__internal_head__"
"""A resource Ray gives its head node alone (``ray._common.constants.HEAD_NODE_RESOURCE_NAME`` in Ray 2.60)."""
ON_THE_HEAD = {"num_cpus": 0, "resources": {HEAD_NODE_RESOURCE: 0.001}}
"""Where a replica runs: on the head, beside Serve's one proxy (``actors.launch.servers.PROXY_LOCATION``). The
head's loss is the cluster's anyway (Serve's controller and Ray's GCS live there); a worker's loss then takes
no replica with it, only supervisors and callers, which Ray starts again elsewhere (the API answers a 503 with
Retry-After meanwhile). A replica spends its time waiting: it needs no CPU of its own."""

# Requests mostly wait on the supervisor (``?wait=`` up to MAX_WAIT_SECONDS), so a replica takes many at
# once; past ``max_queued_requests`` the proxy answers 503 instead of queueing without bound. On shutdown or
# downscaling a replica stops taking requests and finishes the ones it has (a waiting run included) before
# it exits; runs themselves belong to the supervisor and never depend on a replica.
REPLICA_OPTIONS: dict[str, Any] = {
    "ray_actor_options": ON_THE_HEAD,
    "max_ongoing_requests": 256,
    "max_queued_requests": 1024,
    "graceful_shutdown_wait_loop_s": 1,
}
"""What the API's and the tool server's deployments share."""


def _config_from_environment(resources: ExitStack) -> ApiConfig:
    """``RAYDAG_*``, the embedded database started if that is where they point."""
    settings = load_settings()
    # `serve deploy` onto a Serve whose proxy shares its port with any process: refuse to serve there.
    refuse_shared_listener(settings.host, settings.port)
    dsn = resources.enter_context(database(settings))
    return ApiConfig.from_settings(settings, dsn)


@serve.deployment(name=APPLICATION_NAME, graceful_shutdown_timeout_s=MAX_WAIT_SECONDS + 10, **REPLICA_OPTIONS)
@serve.ingress()
class RunAPI:
    """The Serve deployment. Without a config it reads ``RAYDAG_*`` (and may start the embedded database)."""

    def __init__(self, config: ApiConfig | None = None, tools_mounted: bool = True) -> None:
        self._resources = ExitStack()
        self._config = config or _config_from_environment(self._resources)
        self._tools_mounted = tools_mounted

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self._config, tools_mounted=self._tools_mounted)

    def __del__(self) -> None:
        self._resources.close()


def _at_route_prefix(app: ASGIApp) -> ASGIApp:
    """The MCP app, which answers at ``/mcp`` from the root, answering at its Serve application's route prefix
    instead: Serve hands it the full path with the prefix as root path (``/mcp`` and ``/mcp`` in
    ``layout``), which Starlette would route as ``/``."""

    async def at_prefix(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            root_path: str = scope.get("root_path", "")
            path: str = scope["path"]
            rest = path[len(root_path) :] if path.startswith(root_path) else path
            full = MCP_PATH + rest
            scope = {**scope, "path": full, "raw_path": full.encode(), "root_path": ""}
        await app(scope, receive, send)

    return at_prefix


# Tool calls are short (the tool's latency, a database read): a replica takes many at once. Calls in flight
# finish before a replica exits; the supervisor retries a call a replica refused.
@serve.deployment(name=TOOLS_NAME, graceful_shutdown_timeout_s=30, **REPLICA_OPTIONS)
@serve.ingress()
class ToolAPI:
    """The caseops MCP server as a Serve deployment of its own, answering at its application's route prefix
    (``/mcp`` in ``layout``)."""

    def __init__(self, config: ApiConfig | None = None) -> None:
        self._resources = ExitStack()
        self._config = config or _config_from_environment(self._resources)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        server = tool_server_for(self._config, self._config.supervisor.effective_toolsets())
        if server is None:
            raise RuntimeError("the toolsets declare no server for raydag to host (hosting.server)")
        return _at_route_prefix(server.asgi_app())

    def __del__(self) -> None:
        self._resources.close()


def build_app(
    config: ApiConfig | None = None, scaling: Scaling | None = None, *, tools_mounted: bool = True
) -> Application:
    """The Serve application; without ``config`` each replica reads ``RAYDAG_*``, without ``scaling`` it has
    ``RAYDAG_REPLICAS`` replicas (autoscaling up to ``RAYDAG_MAX_REPLICAS`` when that is set). With
    ``tools_mounted`` the MCP server answers at ``/mcp`` inside it (``serve run serve_app:app``)."""
    scaling = scaling or Scaling.from_settings(load_settings())
    return cast(Deployment, RunAPI).options(**scaling.deployment_options()).bind(config, tools_mounted)


def build_tool_app(config: ApiConfig | None = None, scaling: Scaling | None = None) -> Application:
    """The MCP server's own Serve application, scaled like the API."""
    scaling = scaling or Scaling.from_settings(load_settings())
    return cast(Deployment, ToolAPI).options(**scaling.deployment_options()).bind(config)


def layout(
    config: ApiConfig | None = None, scaling: Scaling | None = None
) -> dict[str, tuple[str, Application]]:
    """The tool server as an application of its own beside the API, by Serve application name: its route
    prefix and the application, in the order to deploy them (the tool server first, so the API's first runs
    find it). One proxy, one port: ``mcp_url`` stays ``http://HOST:PORT/mcp``."""
    return {
        TOOLS_NAME: (MCP_PATH, build_tool_app(config, scaling)),
        "raydag": ("/", build_app(config, scaling, tools_mounted=False)),
    }


def app(args: dict[str, str]) -> Application:
    """``serve run serve_app:app``, and the import path of ``serve_config.yaml``: the app read from ``RAYDAG_*``.

    ``serve run`` calls it before it connects to Ray: it then first starts Serve on ``RAYDAG_HOST:RAYDAG_PORT``
    with its proxy owning the port, or exits 2 saying why it cannot (``actors.launch.servers.prepare_serve_run``).
    """
    import ray

    from actors.launch.servers import prepare_serve_run

    if not ray.is_initialized():
        prepare_serve_run(load_settings())
    return build_app()

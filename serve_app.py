"""The run API: FastAPI behind Ray Serve, with the caseops MCP server mounted at ``/mcp``.

``create_app(config)`` builds the ASGI app (uvicorn can serve it directly); ``RunAPI`` is the Serve
deployment around it; ``app`` is what ``serve run serve_app:app`` starts, configured from ``RAYDAG_*``.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Annotated, Any, assert_never, cast

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve import Application, Deployment
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from actors.executor import ExecutorKind
from actors.runtime import database, prepare_database
from actors.service import DEFAULT_GOAL, Cancellation, RunRequest, Submission, SubmitResult
from actors.settings import ApiKeyGrant, Settings, load_settings
from actors.store.database import create_pool
from actors.store.resilience import DatabaseUnavailable
from actors.store.runs import RunStore
from actors.supervisor import SupervisorConfig, get_or_create_supervisor
from actors.tracing import carrier, configure_tracing
from actors.viewer import viewer_router
from actors.views import event_view, load_state, nodes_view, run_view
from dag.budget import BudgetRequest, Budgets
from dag.policy import Principal
from mcp_server.contracts import CASEOPS_TOOLS, CaseId
from mcp_server.server import LOOPBACK_HOSTS, LOOPBACK_ORIGINS, MCP_PATH, ToolServer, ToolServerConfig
from mcp_server.tokens import TaskTokens, load_token_key
from planner.openai_planner import OpenAISettings

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://raydag.dev/problems/"
MAX_WAIT_SECONDS = 60
READY_TIMEOUT_S = 2.0
"""How long ``/readyz`` waits for each dependency before calling it unready."""
APPLICATION_NAME = "raydag-api"
"""The Serve deployment's name, and how its database connections appear in ``pg_stat_activity``."""


@dataclass(frozen=True)
class ApiConfig:
    dsn: str
    mcp_url: str
    token_key: bytes
    api_keys: dict[str, ApiKeyGrant]
    limits: Budgets
    supervisor_name: str
    pool_size: int = 4
    tool_latency_ms: int = 0
    max_body_bytes: int = 2 * 1024 * 1024
    mcp_allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    mcp_allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS
    planners: tuple[str, ...] = ()
    openai: OpenAISettings | None = None
    outbox_webhook_url: str | None = None
    lease_s: float = 15.0
    tenant_tools: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    tool_executor: ExecutorKind = ExecutorKind.CALLERS
    tool_callers: int = 2

    @classmethod
    def from_settings(cls, settings: Settings, dsn: str) -> ApiConfig:
        hosts, origins = settings.mcp_hosts() or (LOOPBACK_HOSTS, LOOPBACK_ORIGINS)
        return cls(
            mcp_allowed_hosts=hosts,
            mcp_allowed_origins=origins,
            dsn=dsn,
            mcp_url=settings.mcp_url or f"http://{settings.host}:{settings.port}{MCP_PATH}",
            token_key=load_token_key(
                settings.token_key.get_secret_value() if settings.token_key else None, settings.home_dir
            ),
            api_keys=settings.api_key_grants(),
            limits=settings.budgets,
            supervisor_name=settings.supervisor_name,
            pool_size=settings.db_pool_size,
            tool_latency_ms=settings.tool_latency_ms,
            tenant_tools=settings.tenant_tool_grants(),
            planners=settings.planner_paths(),
            openai=settings.openai_settings(),
            outbox_webhook_url=settings.outbox_webhook_url,
            lease_s=settings.lease_s,
            tool_executor=settings.tool_executor,
            tool_callers=settings.tool_callers,
        )

    def supervisor_config(self) -> SupervisorConfig:
        return SupervisorConfig(
            dsn=self.dsn,
            mcp_url=self.mcp_url,
            token_key=self.token_key,
            limits=self.limits,
            pool_size=self.pool_size,
            tenant_tools=self.tenant_tools,
            planners=self.planners,
            openai=self.openai,
            outbox_webhook_url=self.outbox_webhook_url,
            lease_s=self.lease_s,
            tool_executor=self.tool_executor,
            tool_callers=self.tool_callers,
        )


class Problem(Exception):
    """An RFC 9457 problem: the only shape errors leave this API in."""

    def __init__(
        self, status: int, slug: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def response(self, instance: str) -> JSONResponse:
        body = {
            "type": PROBLEM_BASE + self.slug,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            **self.extra,
        }
        return JSONResponse(body, status_code=self.status, media_type=PROBLEM_JSON, headers=self.headers)


class RunCreate(BaseModel):
    """``POST /runs``. Tenant, subject and scopes are deliberately absent: they come from the API key."""

    model_config = ConfigDict(extra="forbid")

    case_id: CaseId
    goal: str = Field(default=DEFAULT_GOAL, min_length=1, max_length=2000)
    planner: str = Field(default="conformance", min_length=1, max_length=64)
    plan: dict[str, Any] | None = None
    budgets: BudgetRequest | None = None


IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


class BodyLimit:
    """Refuses request bodies over ``max_bytes`` with 413 before anything parses them (pure ASGI, no buffering
    of responses)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self._app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
            await self._refuse(scope, send)
            return
        seen = 0

        async def counted() -> Any:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self._max_bytes:
                raise _BodyTooLarge
            return message

        try:
            await self._app(scope, counted, send)
        except _BodyTooLarge:
            await self._refuse(scope, send)

    async def _refuse(self, scope: Any, send: Any) -> None:
        problem = Problem(413, "body-too-large", f"the request body exceeds {self._max_bytes} bytes")
        response = problem.response(scope.get("path", ""))
        await response(scope, _no_receive, send)


class _BodyTooLarge(Exception):
    pass


async def _no_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


@dataclass
class _AppState:
    """What the lifespan opens for the routes: set on startup, closed on shutdown."""

    store: RunStore = field(init=False)
    supervisor: Any = field(init=False)


def create_app(config: ApiConfig) -> FastAPI:
    configure_tracing("raydag-api")
    tool_server = ToolServer(
        ToolServerConfig(
            dsn=config.dsn,
            tokens=TaskTokens(key=config.token_key, audience=config.mcp_url),
            latency_ms=config.tool_latency_ms,
            pool_size=config.pool_size,
            allowed_hosts=config.mcp_allowed_hosts,
            allowed_origins=config.mcp_allowed_origins,
        )
    )
    state = _AppState()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await prepare_database(config.dsn)
        pool = await create_pool(config.dsn, max_size=config.pool_size, application_name=APPLICATION_NAME)
        state.store = RunStore(pool)
        state.supervisor = get_or_create_supervisor(
            config.supervisor_config(), name=config.supervisor_name, detached=True
        )
        # A supervisor that outlived an earlier deployment adopts this one's configuration for new runs.
        await state.supervisor.reconfigure.remote(config.supervisor_config())
        try:
            async with tool_server.lifespan():
                yield
        finally:
            await pool.close()

    app = FastAPI(title="raydag", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    # A route, not a mount: the MCP app sees the path /mcp unchanged, and other paths stay FastAPI's 404s.
    app.router.routes.append(Route(MCP_PATH, endpoint=tool_server.asgi, methods=["GET", "POST", "DELETE"]))
    app.state.tool_server = tool_server

    @app.exception_handler(Problem)
    async def on_problem(request: Request, problem: Problem) -> JSONResponse:
        return problem.response(request.url.path)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"location": "/" + "/".join(str(part) for part in error["loc"]), "message": error["msg"]}
            for error in exc.errors()[:20]
        ]
        problem = Problem(
            422, "invalid-request", "the request does not have the expected shape", errors=errors
        )
        return problem.response(request.url.path)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        problem = Problem(exc.status_code, "http-error", str(exc.detail), headers=dict(exc.headers or {}))
        return problem.response(request.url.path)

    @app.exception_handler(DatabaseUnavailable)
    async def on_database_down(request: Request, exc: DatabaseUnavailable) -> JSONResponse:
        return _unavailable().response(request.url.path)

    @app.exception_handler(Exception)
    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        problem = Problem(500, "internal-error", "the server failed; nothing about your request was lost")
        return problem.response(request.url.path)

    def authenticated(authorization: Annotated[str | None, Header()] = None) -> Principal:
        """Who is asking. A dependency, so it runs before the body is validated: no key, no 422 hints."""
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and key:
            for known, grant in config.api_keys.items():
                if hmac.compare_digest(known.encode(), key.strip().encode()):
                    return grant.principal()
        raise Problem(
            401,
            "unauthorized",
            "a valid API key is required: Authorization: Bearer <key>",
            headers={"WWW-Authenticate": 'Bearer realm="raydag"'},
        )

    # A default, not an Annotated alias: annotations are strings here, resolved in module scope.
    caller = Depends(authenticated)

    async def run_or_404(principal: Principal, run_id: str) -> dict[str, Any]:
        row = await state.store.run_row(principal, run_id)
        if row is None:
            raise Problem(404, "run-not-found", "no run with this id was found")
        return row

    async def history_or_410(principal: Principal, run_id: str) -> dict[str, Any]:
        row = await run_or_404(principal, run_id)
        if row["pruned_at"] is not None:
            raise Problem(
                410,
                "history-pruned",
                f"the run's events were removed by retention on {row['pruned_at'].isoformat()}; "
                "its summary and result remain at /runs/{run_id}",
            )
        return row

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers. Says nothing about its dependencies (that is ``/readyz``)."""
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> dict[str, Any]:
        """Readiness: PostgreSQL and the supervisor both answer within ``READY_TIMEOUT_S``; 503 otherwise."""
        database, supervisor = await asyncio.gather(
            _check(state.store.ping()), _check(state.supervisor.ping.remote())
        )
        checks = {"database": database, "supervisor": supervisor}
        if not all(check["ok"] for check in checks.values()):
            failing = ", ".join(name for name, check in checks.items() if not check["ok"])
            raise Problem(
                503,
                "not-ready",
                f"not ready: {failing} did not answer",
                checks=checks,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        return {"status": "ready", "checks": checks}

    @app.post("/runs", status_code=201)
    async def create_run(
        body: RunCreate,
        idempotency_key: IdempotencyKey = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
        principal: Principal = caller,
    ) -> JSONResponse:
        # FastAPI's server span of this request is current here: the run continues its trace.
        request = RunRequest(
            principal=principal,
            case_id=body.case_id,
            goal=body.goal,
            planner=body.planner,
            plan=body.plan,
            budgets=body.budgets,
            idempotency_key=idempotency_key,
            trace=carrier(),
        )
        submitted: SubmitResult = await state.supervisor.submit.remote(request)
        span = trace.get_current_span()
        if submitted.run_id is not None:
            span.set_attribute("raydag.run_id", submitted.run_id)
        span.set_attribute("raydag.submission", submitted.outcome.value)
        _raise_for_submission(submitted)
        assert submitted.run_id is not None
        if wait > 0:
            await state.supervisor.wait.remote(submitted.run_id, wait)
        row = await run_or_404(principal, submitted.run_id)
        created = submitted.outcome is Submission.CREATED
        return JSONResponse(
            run_view(row),
            status_code=201 if created else 200,
            headers={"Location": f"/runs/{submitted.run_id}"},
        )

    @app.get("/runs/{run_id}")
    async def get_run(run_id: str, principal: Principal = caller) -> dict[str, Any]:
        return run_view(await run_or_404(principal, run_id))

    @app.get("/runs/{run_id}/nodes")
    async def get_nodes(run_id: str, principal: Principal = caller) -> list[dict[str, Any]]:
        row = await history_or_410(principal, run_id)
        run = str(row["run_id"])
        return nodes_view(await load_state(state.store, run), CASEOPS_TOOLS, await state.store.ledger(run))

    @app.get("/runs/{run_id}/events")
    async def get_events(
        run_id: str, principal: Principal = caller, after: Annotated[int, Query(ge=0)] = 0
    ) -> list[dict[str, Any]]:
        """The run's events in order; ``after`` resumes from a sequence number the client already has."""
        row = await history_or_410(principal, run_id)
        return [event_view(stored) for stored in await state.store.events(str(row["run_id"]), after=after)]

    @app.post("/runs/{run_id}/cancel")
    async def cancel_run(run_id: str, principal: Principal = caller) -> dict[str, Any]:
        """Cancel a live run; cancelling a finished run changes nothing and says so."""
        row = await run_or_404(principal, run_id)
        outcome: Cancellation = await state.supervisor.cancel.remote(str(row["run_id"]))
        if outcome is Cancellation.NOT_OWNED:
            raise Problem(
                409, "run-not-owned", "the run is live but no supervisor drives it now; retry shortly"
            )
        return {"cancel": outcome.value, **run_view(await run_or_404(principal, run_id))}

    # The run viewer (/view, /edges, /stream): authenticated and tenant-checked like the routes above.
    app.include_router(
        viewer_router(store=lambda: state.store, authenticated=authenticated, readable_run=history_or_410)
    )

    return app


RETRY_AFTER_S = 5


async def _check(answer: Awaitable[Any]) -> dict[str, Any]:
    """Whether a dependency answered in time, how fast, and why not (the exception's type: no details)."""
    started = time.perf_counter()
    try:
        await asyncio.wait_for(answer, READY_TIMEOUT_S)
    except TimeoutError:
        return {"ok": False, "reason": f"no answer within {READY_TIMEOUT_S:g} s"}
    except Exception as exc:
        return {"ok": False, "reason": type(exc).__name__}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _unavailable() -> Problem:
    return Problem(
        503,
        "database-unavailable",
        "the run store cannot be reached; nothing was accepted, retry later",
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def _raise_for_submission(submitted: SubmitResult) -> None:
    match submitted.outcome:
        case Submission.CREATED | Submission.REPLAYED:
            return
        case Submission.CASE_NOT_FOUND:
            # Byte for byte the same answer for an unknown case and another tenant's case.
            raise Problem(404, "case-not-found", "no case with this id was found")
        case Submission.IDEMPOTENCY_CONFLICT:
            raise Problem(
                409,
                "idempotency-key-reused",
                "this Idempotency-Key was already used with a different request",
                run_id=submitted.run_id,
            )
        case Submission.PLAN_INVALID:
            assert submitted.error is not None
            raise Problem(422, "plan-invalid", submitted.error["message"], plan_error=submitted.error)
        case Submission.UNKNOWN_PLANNER:
            raise Problem(422, "unknown-planner", "the planner is not available", **(submitted.error or {}))
        case Submission.UNAVAILABLE:
            raise _unavailable()
        case Submission.PLANNER_UNAVAILABLE:
            error = submitted.error or {}
            raise Problem(422, "planner-unavailable", str(error.get("reason")), planner=error.get("planner"))
        case Submission.BUDGET_ABOVE_LIMIT:
            error = submitted.error or {}
            raise Problem(422, "budget-above-limit", str(error.get("message")), above=error.get("above"))
        case _:
            assert_never(submitted.outcome)


@dataclass(frozen=True)
class Scaling:
    """How many API replicas: a fixed count, or autoscaling from ``replicas`` up to ``max_replicas``.

    Each replica holds up to ``2 × RAYDAG_DB_POOL_SIZE`` database connections (the API's pool and the MCP
    server's): see docs/DEPLOY.md for the sum against PostgreSQL's ``max_connections``.
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


# Requests mostly wait on the supervisor (``?wait=`` up to MAX_WAIT_SECONDS), so a replica takes many at
# once; past ``max_queued_requests`` the proxy answers 503 instead of queueing without bound. On shutdown or
# downscaling a replica stops taking requests and finishes the ones it has (a waiting run included) before
# it exits; runs themselves belong to the supervisor and never depend on a replica.
@serve.deployment(
    name=APPLICATION_NAME,
    ray_actor_options={"num_cpus": 0},
    max_ongoing_requests=256,
    max_queued_requests=1024,
    graceful_shutdown_wait_loop_s=1,
    graceful_shutdown_timeout_s=MAX_WAIT_SECONDS + 10,
)
@serve.ingress()
class RunAPI:
    """The Serve deployment. Without a config it reads ``RAYDAG_*`` (and may start the embedded database)."""

    def __init__(self, config: ApiConfig | None = None) -> None:
        self._resources = ExitStack()
        if config is None:
            settings = load_settings()
            dsn = self._resources.enter_context(database(settings))
            config = ApiConfig.from_settings(settings, dsn)
        self._config = config

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self._config)

    def __del__(self) -> None:
        self._resources.close()


def build_app(config: ApiConfig | None = None, scaling: Scaling | None = None) -> Application:
    """The Serve application; without ``config`` each replica reads ``RAYDAG_*``, without ``scaling`` it has
    ``RAYDAG_REPLICAS`` replicas (autoscaling up to ``RAYDAG_MAX_REPLICAS`` when that is set)."""
    scaling = scaling or Scaling.from_settings(load_settings())
    return cast(Deployment, RunAPI).options(**scaling.deployment_options()).bind(config)


app = build_app()
"""``serve run serve_app:app``; ``serve_config.yaml`` deploys the same app with its options spelled out."""

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
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, cast

from fastapi import Depends, FastAPI, Header, Query
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from opentelemetry import trace
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from ray import serve
from ray.serve import Application, Deployment
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from actors.api import (
    DATABASE_RETRY_AFTER_S,
    Problem,
    RequestDeadline,
    RequestGuard,
    ask,
    database_unavailable,
    install_problem_handlers,
    problem_responses,
    raise_for_submission,
)
from actors.api.operations import operations_router
from actors.api.questions import questions_router
from actors.api.reviews import reviews_router
from actors.api.supervisors import Supervisors
from actors.api.viewer import viewer_router
from actors.api.views import event_view, load_state, nodes_view, run_view
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
from actors.observe.tracing import carrier, configure_tracing
from actors.run.submission import (
    DEFAULT_GOAL,
    Cancellation,
    ContinueRequest,
    RunRequest,
    Submission,
    SubmitResult,
)
from actors.store.database import create_pool
from actors.store.operations import OperationStore
from actors.store.questions import QuestionStore
from actors.store.resilience import REQUEST_DEADLINE_S, DatabaseUnavailable, deadline, within
from actors.store.reviews import ReviewStore
from actors.store.runs import MAX_SEQ, RunStore
from actors.store.setup import prepare_database
from actors.supervisor import SupervisorConfig, get_or_create_supervisor, supervisor_names
from actors.toolsets.config import Toolsets
from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE
from dag.policy import Principal
from dag.questions import MAX_ANSWER_CHARS
from dag.run_resource import (
    IDENTIFIER_PATTERN,
    MAX_RESOURCE_KEY_LENGTH,
    MAX_RESOURCE_KEYS,
    MAX_RESOURCE_VALUE_LENGTH,
    RESOURCE_KEY_PATTERN,
)
from dag.storable import unfit_values
from dag.tokens import TaskTokens

log = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 60
READY_TIMEOUT_S = 2.0
"""How long ``/readyz`` waits for each dependency before calling it unready."""
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


Identifier = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=IDENTIFIER_PATTERN)]
ResourceKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_RESOURCE_KEY_LENGTH, pattern=RESOURCE_KEY_PATTERN)
]
RunResource = Annotated[
    dict[ResourceKey, Annotated[str, StringConstraints(min_length=1, max_length=MAX_RESOURCE_VALUE_LENGTH)]],
    Field(
        max_length=MAX_RESOURCE_KEYS,
        description='What the run is about, e.g. `{"case_id": "C-102"}` or `{"root": "/srv/reports"}`: '
        "the keys the tools' run-bound inputs are bound to, each with a string value; none (`{}`, or absent) "
        "for a run whose tools bind nothing.",
        json_schema_extra={"additionalProperties": False},  # a key off the pattern is refused, not ignored
    ),
]


class RunCreate(BaseModel):
    """``POST /runs``. Tenant, subject and scopes are deliberately absent: they come from the API key."""

    model_config = ConfigDict(extra="forbid")

    resource: RunResource | None = None
    case_id: Identifier | None = Field(
        default=None, description='A shorthand: `{"case_id": X}` is `{"resource": {"case_id": X}}`.'
    )
    goal: str = Field(default=DEFAULT_GOAL, min_length=1, max_length=2000)
    planner: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The planner: `outputs` (the default with a `plan`), `openai`, or the toolsets' own (the "
        "default without one; caseops: `conformance`).",
    )
    plan: dict[str, Any] | None = None
    budgets: BudgetRequest | None = None
    stage: str = Field(
        default=INVESTIGATE,
        pattern=r"^[a-z][a-z0-9_]{0,39}$",
        description="The run's stage: the tools declared for it are the run's (`investigate` reads; a stage "
        "that acts, caseops' `act`, offers writes, each approved as an operation: docs/EFFECTS.md).",
    )
    review: Literal["plan"] | None = Field(
        default=None,
        description="`plan`: each round's plan waits for a person's yes (`/runs/{id}/reviews`) before anything "
        "of it runs (docs/PEOPLE.md). A tenant's policy may require it.",
    )

    @model_validator(mode="after")
    def _one_resource(self) -> RunCreate:
        if (
            self.resource is not None
            and self.case_id is not None
            and self.resource.get("case_id") != self.case_id
        ):
            raise ValueError("case_id and resource.case_id disagree: give one, or the same value in both")
        return self

    @property
    def run_resource(self) -> dict[str, str]:
        """The run's resource, the shorthand expanded; none at all for a run whose tools bind nothing (whether
        its tools need one is admission's to say: ``resource-mismatch``)."""
        if self.resource is not None:
            return dict(self.resource)
        return {"case_id": str(self.case_id)} if self.case_id is not None else {}

    def unfit(self) -> list[dict[str, str]]:
        """Where the body holds what PostgreSQL cannot store or JSON cannot carry (NUL, lone surrogates,
        non-finite numbers); the typed fields refuse those themselves."""
        free = {"goal": self.goal, "planner": self.planner, "plan": self.plan, "resource": self.resource}
        return [{"location": f"/body{pointer}", "message": reason} for pointer, reason in unfit_values(free)]


class RunContinue(BaseModel):
    """``POST /runs/{id}/continue``. The tenant, principal, resource, stage, planner and tool definitions are
    the earlier run's: only these may be new."""

    model_config = ConfigDict(extra="forbid")

    goal: str | None = Field(
        default=None, min_length=1, max_length=2000, description="A new goal; by default the earlier run's."
    )
    answer: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ANSWER_CHARS,
        description="What the planner is told, with who said it, as a person's answer to what the run stopped "
        "on; never authority.",
    )
    budgets: BudgetRequest | None = Field(
        default=None,
        description="Applied over the earlier run's budgets, each within the server's limit: more room than "
        "the earlier run had is allowed.",
    )

    def unfit(self) -> list[dict[str, str]]:
        free = {"goal": self.goal, "answer": self.answer}
        return [{"location": f"/body{pointer}", "message": reason} for pointer, reason in unfit_values(free)]


bearer = Depends(HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`."))
"""Declares the API key in the OpenAPI document (a bearer scheme) and reads it; ``authenticated`` checks it."""
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]
EventCursor = Annotated[int, Query(ge=0, le=MAX_SEQ)]

WAIT_GRACE_S = 2.0
"""How much longer than ``?wait=`` the API waits for the supervisor's answer before it stops waiting."""


@dataclass
class _AppState:
    """What the lifespan opens for the routes: set on startup, closed on shutdown."""

    store: RunStore = field(init=False)
    operations: OperationStore = field(init=False)
    reviews: ReviewStore = field(init=False)
    questions: QuestionStore = field(init=False)
    supervisors: Supervisors = field(init=False)


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
    configure_tracing("raydag-api")
    toolsets = config.supervisor.effective_toolsets()
    hosting = hosted(toolsets)
    tool_server = tool_server_for(config, toolsets) if tools_mounted else None
    declared = toolsets.scopes
    state = _AppState()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        schemas = hosting.schemas if hosting is not None and tool_server is not None else ()
        await prepare_database(config.dsn, schemas=schemas)
        pool = await create_pool(config.dsn, max_size=config.pool_size, application_name=APPLICATION_NAME)
        state.store = RunStore(pool)
        state.operations = OperationStore(pool)
        state.reviews = ReviewStore(pool)
        state.questions = QuestionStore(pool)
        state.supervisors = Supervisors(
            {
                name: get_or_create_supervisor(
                    config.supervisor, name=name, detached=True, spread=(index, len(config.supervisor_names))
                )
                for index, name in enumerate(config.supervisor_names)
            }
        )
        # A supervisor that outlived an earlier deployment adopts this one's configuration for new runs.
        await asyncio.gather(
            *(handle.reconfigure.remote(config.supervisor) for _, handle in state.supervisors.all())
        )
        try:
            async with tool_server.lifespan() if tool_server else contextlib.nullcontext():
                yield
        finally:
            await pool.close()

    # No /docs or /redoc: Swagger UI and ReDoc run script from a CDN inside the API's origin (where the run
    # viewer holds API keys), which no useful CSP can allow safely. /openapi.json serves any such tool elsewhere.
    app = FastAPI(title="raydag", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_middleware(RequestDeadline)
    app.add_middleware(RequestGuard, max_bytes=config.max_body_bytes, opaque_paths=(MCP_PATH,))
    if tool_server is not None:
        # A route, not a mount: the MCP app sees the path /mcp unchanged, and other paths stay FastAPI's 404s.
        app.router.routes.append(
            Route(MCP_PATH, endpoint=tool_server.asgi, methods=["GET", "POST", "DELETE"])
        )
        app.state.tool_server = tool_server

    install_problem_handlers(app)

    async def authenticated(credentials: HTTPAuthorizationCredentials | None = bearer) -> Principal:
        """Who is asking. A dependency, so it runs before the body is validated: no key, no 422 hints.
        ``async`` though it never awaits: FastAPI runs a plain ``def`` dependency in a worker thread, a hand-off
        that cost the replica about 5 % of its CPU under load for a comparison of a few strings."""
        if credentials is not None:
            for known, grant in config.api_keys.items():
                if hmac.compare_digest(known.encode(), credentials.credentials.strip().encode()):
                    return grant.principal(declared)
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

    @app.get("/healthz", responses=HEALTH_RESPONSES)
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers. Says nothing about its dependencies (that is ``/readyz``)."""
        return {"status": "ok"}

    @app.get("/readyz", responses={**HEALTH_RESPONSES, **problem_responses(503)})
    async def readyz() -> dict[str, Any]:
        """Readiness: PostgreSQL and every supervisor answer within ``READY_TIMEOUT_S``; 503 otherwise. The
        first supervisor is ``supervisor`` in ``checks``, any other ``supervisor:NAME``."""
        answers: dict[str, Any] = {}
        keys = ["supervisor", *(f"supervisor:{name}" for name in state.supervisors.names[1:])]

        def ping(key: str, handle: Any) -> Callable[[], Awaitable[None]]:
            async def answer() -> None:
                answers[key] = await handle.ping.remote()

            return answer

        database, *supervisors = await asyncio.gather(
            _check(state.store.ping),
            *(
                _check(ping(key, handle))
                for key, (_, handle) in zip(keys, state.supervisors.all(), strict=True)
            ),
        )
        checks = {"database": database, **dict(zip(keys, supervisors, strict=True))}
        toolsets: dict[str, Any] = answers.get("supervisor", {}).get("toolsets", {})
        servers: dict[str, Any] = toolsets.get("servers", {})
        failing = [name for name, check in checks.items() if not check["ok"]]
        unreachable = [name for name, server in servers.items() if not server["ok"]]
        if failing or unreachable:
            problems = [f"{', '.join(failing)} did not answer"] if failing else []
            problems += [f"toolset server {name!r} is {servers[name]['error']}" for name in unreachable]
            raise Problem(
                503,
                "not-ready",
                f"not ready: {'; '.join(problems)}",
                checks=checks,
                toolsets=servers,
                headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
            )
        return {"status": "ready", "checks": checks, "toolsets": servers}

    @app.post(
        "/runs",
        status_code=201,
        responses={
            201: {"description": "A new run; Location names it."},
            200: {"description": "A replay: the run this Idempotency-Key already created."},
            **problem_responses(400, 401, 404, 409, 413, 422, 503),
        },
    )
    async def create_run(
        body: RunCreate,
        idempotency_key: IdempotencyKey = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
        principal: Principal = caller,
    ) -> JSONResponse:
        unfit = body.unfit()
        if unfit:
            raise Problem(
                422, "invalid-request", "the request holds values that cannot be stored", errors=unfit
            )
        # FastAPI's server span of this request is current here: the run continues its trace.
        request = RunRequest(
            principal=principal,
            resource=body.run_resource,
            goal=body.goal,
            planner=body.planner,
            plan=body.plan,
            budgets=body.budgets,
            idempotency_key=idempotency_key,
            trace=carrier(),
            stage=body.stage,
            review=body.review == "plan",
        )
        supervisor, line = state.supervisors.next()
        submitted: SubmitResult = await ask(lambda: supervisor.submit.remote(request), line=line)
        span = trace.get_current_span()
        if submitted.run_id is not None:
            span.set_attribute("raydag.run_id", submitted.run_id)
        span.set_attribute("raydag.submission", submitted.outcome.value)
        conflicting_run_visible = (
            submitted.outcome is Submission.IDEMPOTENCY_CONFLICT
            and submitted.run_id is not None
            and await state.store.run_row(principal, submitted.run_id) is not None
        )
        raise_for_submission(submitted, conflicting_run_visible=conflicting_run_visible)
        return await accepted(principal, submitted, wait, supervisor)

    async def accepted(
        principal: Principal, submitted: SubmitResult, wait: float, supervisor: Any
    ) -> JSONResponse:
        """The run a request created (201) or replayed (200), once it has ended or ``wait`` seconds passed."""
        run_id = submitted.run_id
        assert run_id is not None
        if wait > 0:
            try:
                await ask(lambda: supervisor.wait.remote(run_id, wait, True), within_s=wait + WAIT_GRACE_S)
            except Problem:
                log.warning("the supervisor stopped answering while run %s was awaited", run_id)
            with deadline(REQUEST_DEADLINE_S):  # the wait was legitimate: the read gets a budget of its own
                row = await accepted_row(principal, run_id)
        else:
            row = await accepted_row(principal, run_id)
        return JSONResponse(
            run_view(row),
            status_code=201 if submitted.outcome is Submission.CREATED else 200,
            headers={"Location": f"/runs/{run_id}"},
        )

    async def accepted_row(principal: Principal, run_id: str) -> dict[str, Any]:
        """The row of a run this request created or replayed: a 503 now says so, and where to read it later."""
        try:
            return await run_or_404(principal, run_id)
        except DatabaseUnavailable:
            raise database_unavailable(
                "the run was accepted, but the run store cannot be reached to show it; GET its Location later",
                run_id=run_id,
            ) from None

    @app.get("/runs/{run_id}", responses=problem_responses(401, 404, 503))
    async def get_run(run_id: str, principal: Principal = caller) -> dict[str, Any]:
        return run_view(await run_or_404(principal, run_id))

    @app.get("/runs/{run_id}/nodes", responses=problem_responses(401, 404, 410, 503))
    async def get_nodes(run_id: str, principal: Principal = caller) -> list[dict[str, Any]]:
        row = await history_or_410(principal, run_id)
        run = str(row["run_id"])
        contracts = await state.supervisors.ask_any(lambda supervisor: supervisor.contracts.remote())
        return nodes_view(await load_state(state.store, run), contracts, await state.store.ledger(run))

    @app.get("/runs/{run_id}/events", responses=problem_responses(401, 404, 410, 422, 503))
    async def get_events(
        run_id: str, principal: Principal = caller, after: EventCursor = 0
    ) -> list[dict[str, Any]]:
        """The run's events in order; ``after`` resumes from a sequence number the client already has."""
        row = await history_or_410(principal, run_id)
        return [event_view(stored) for stored in await state.store.events(str(row["run_id"]), after=after)]

    @app.post("/runs/{run_id}/cancel", responses=problem_responses(401, 404, 409, 503))
    async def cancel_run(run_id: str, principal: Principal = caller) -> dict[str, Any]:
        """Cancel a live run; cancelling a finished run changes nothing and says so."""
        row = await run_or_404(principal, run_id)
        # Only the run's owner can stop its calls; if it is gone, another says the run is not its own.
        outcome: Cancellation = await state.supervisors.ask_any(
            lambda supervisor: supervisor.cancel.remote(str(row["run_id"])), first=row["owner"]
        )
        if outcome is Cancellation.NOT_OWNED:
            raise Problem(
                409, "run-not-owned", "the run is live but no supervisor drives it now; retry shortly"
            )
        return {"cancel": outcome.value, **run_view(await run_or_404(principal, run_id))}

    @app.post(
        "/runs/{run_id}/continue",
        status_code=201,
        responses={
            201: {"description": "The continuation, a new run; Location names it."},
            200: {"description": "A replay: the continuation this same request already created."},
            **problem_responses(400, 401, 404, 409, 410, 413, 422, 503),
        },
    )
    async def continue_run(
        run_id: str,
        body: RunContinue | None = None,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_SECONDS)] = 0,
        principal: Principal = caller,
    ) -> JSONResponse:
        """Continue a run that stopped: a new run over the same tenant, principal and resource, linked both
        ways, that reuses every read that succeeded and takes its writes over by id (docs/PEOPLE.md)."""
        body = body if body is not None else RunContinue()
        unfit = body.unfit()
        if unfit:
            raise Problem(
                422, "invalid-request", "the request holds values that cannot be stored", errors=unfit
            )
        request = ContinueRequest(
            principal=principal,
            run_id=run_id,
            goal=body.goal,
            answer=body.answer,
            budgets=body.budgets,
            trace=carrier(),
        )
        supervisor, line = state.supervisors.next()
        submitted: SubmitResult = await ask(lambda: supervisor.continue_run.remote(request), line=line)
        raise_for_submission(submitted, conflicting_run_visible=True)
        return await accepted(principal, submitted, wait, supervisor)

    # The operation ledger (/runs/{id}/operations…): a run's writes, and a person's decisions on them.
    app.include_router(
        operations_router(
            operations=lambda: state.operations,
            authenticated=authenticated,
            readable_run=run_or_404,
            policy_of=config.supervisor.policy_of,
        )
    )
    # A planner's questions (/runs/{id}/questions…): what it asked a person, and a person's answers.
    app.include_router(
        questions_router(
            questions=lambda: state.questions, authenticated=authenticated, readable_run=run_or_404
        )
    )
    # Plan review (/runs/{id}/reviews…): a run's plans put to a person, and a person's decisions on them.
    app.include_router(
        reviews_router(
            reviews=lambda: state.reviews,
            authenticated=authenticated,
            readable_run=run_or_404,
            policy_of=config.supervisor.policy_of,
        )
    )
    # The run viewer (/view, /edges, /stream): authenticated and tenant-checked like the routes above.
    app.include_router(
        viewer_router(store=lambda: state.store, authenticated=authenticated, readable_run=history_or_410)
    )

    return app


HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"description": "No API key needed."}}


async def _check(answer: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
    """Whether a dependency answered in time, how fast, and why not (the exception's type: no details)."""
    started = time.perf_counter()
    try:
        await within(answer, READY_TIMEOUT_S)
    except TimeoutError:
        return {"ok": False, "reason": f"no answer within {READY_TIMEOUT_S:g} s"}
    except Exception as exc:
        return {"ok": False, "reason": type(exc).__name__}
    return {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}


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

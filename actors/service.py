"""Run submission, ownership in this process, waiting and cancellation: what the RunSupervisor actor hosts."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import asyncpg

from actors.executor import ToolExecutor
from actors.metrics import NO_METRICS, RunMetrics, report
from actors.recording import LeaseLost, now
from actors.runner import RunDriver
from actors.store.outbox import LogSink, OutboxRelay, OutboxSink
from actors.store.ownership import Leases
from actors.store.resilience import DatabaseUnavailable
from actors.store.runs import Creation, RunStore
from dag.budget import BudgetAboveLimit, BudgetRequest, Budgets
from dag.contracts import ToolCatalogue
from dag.errors import PlanInvalid
from dag.events import RunCreated
from dag.fingerprint import sha256_hex
from dag.health import ToolHealth
from dag.plan import Plan
from dag.policy import Principal
from dag.run_state import RunState, apply, fold
from dag.states import RunStatus
from dag.validate import validate_plan
from mcp_server.tokens import TaskTokens
from planner.base import Planner

log = logging.getLogger(__name__)

DEFAULT_GOAL = "Check that the case has every document its policy requires."
_POLL_S = 0.1


@dataclass(frozen=True)
class RunRequest:
    """A request to investigate a case. ``principal`` comes from authentication, the rest from the caller."""

    principal: Principal
    case_id: str
    goal: str = DEFAULT_GOAL
    planner: str = "conformance"
    plan: Mapping[str, Any] | None = None
    budgets: BudgetRequest | None = None
    idempotency_key: str | None = None
    trace: Mapping[str, str] | None = None
    """The caller's W3C trace context; not part of what makes two requests the same."""

    def fingerprint(self) -> str:
        """What makes two requests "the same" for an idempotency key: the body and who sent it."""
        return sha256_hex(
            {
                "subject": self.principal.subject,
                "scopes": sorted(self.principal.scopes),
                "case_id": self.case_id,
                "goal": self.goal,
                "planner": self.planner,
                "plan": self.plan,
                "budgets": self.budgets.model_dump(exclude_none=True) if self.budgets else None,
            }
        )


class Submission(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    CASE_NOT_FOUND = "case_not_found"
    UNKNOWN_PLANNER = "unknown_planner"
    PLAN_INVALID = "plan_invalid"
    BUDGET_ABOVE_LIMIT = "budget_above_limit"
    PLANNER_UNAVAILABLE = "planner_unavailable"
    """The planner exists but this deployment cannot offer it (the model planner without a key)."""
    UNAVAILABLE = "unavailable"
    """PostgreSQL cannot be reached: nothing was accepted, the client should retry later."""


@dataclass(frozen=True)
class SubmitResult:
    outcome: Submission
    run_id: str | None = None
    error: dict[str, Any] | None = None


class Cancellation(StrEnum):
    CANCELLED = "cancelled"
    ALREADY_FINISHED = "already_finished"
    NOT_FOUND = "not_found"
    NOT_OWNED = "not_owned"
    """The run is live but driven by no process here (its supervisor died); recovery owns it."""


class RunService:
    """Creates runs (once per idempotency key), drives them in the background, waits on and cancels them."""

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        executor: ToolExecutor,
        catalogue: ToolCatalogue,
        planners: Mapping[str, Planner],
        tokens: TaskTokens,
        mcp_url: str,
        limits: Budgets,
        tenant_tools: Mapping[str, tuple[str, ...]] | None = None,
        health: ToolHealth | None = None,
        owner: str = "raydag-local",
        lease_s: float = 15.0,
        outbox_sink: OutboxSink | None = None,
        unavailable_planners: Mapping[str, str] | None = None,
        metrics: RunMetrics = NO_METRICS,
    ) -> None:
        self._pool = pool
        self._metrics = metrics
        self.owner = owner
        self.store = RunStore(pool, owner=owner, lease_s=lease_s)
        self._leases = Leases(pool, owner, lease_s)
        self._relay = OutboxRelay(pool, outbox_sink if outbox_sink is not None else LogSink())
        self._lease_s = lease_s
        self._unavailable_planners = dict(unavailable_planners or {})
        self._catalogue = catalogue
        self._planners = planners
        self._limits = limits
        self._tenant_tools = tenant_tools
        self._driver = RunDriver(
            sink=self.store,
            executor=executor,
            catalogue=catalogue,
            planners=planners,
            tokens=tokens,
            mcp_url=mcp_url,
            health=health,
            metrics=metrics,
        )
        self._runs: dict[str, asyncio.Task[Any]] = {}
        self._cancels: dict[str, asyncio.Event] = {}
        self._creating: set[str] = set()
        self._background: list[asyncio.Task[None]] = []

    async def submit(self, request: RunRequest) -> SubmitResult:
        try:
            return await self._submit(request)
        except DatabaseUnavailable as exc:
            log.warning("refusing a run: %s", exc)
            return SubmitResult(Submission.UNAVAILABLE, error={"message": str(exc)})

    async def _submit(self, request: RunRequest) -> SubmitResult:
        if request.planner in self._unavailable_planners:
            return SubmitResult(
                Submission.PLANNER_UNAVAILABLE,
                error={"planner": request.planner, "reason": self._unavailable_planners[request.planner]},
            )
        if request.planner not in self._planners:
            return SubmitResult(
                Submission.UNKNOWN_PLANNER,
                error={"planner": request.planner, "known": sorted(self._planners)},
            )
        try:
            budgets = self._limits.lowered_by(request.budgets)
        except BudgetAboveLimit as exc:
            above = {name: {"requested": asked, "limit": limit} for name, (asked, limit) in exc.above.items()}
            return SubmitResult(Submission.BUDGET_ABOVE_LIMIT, error={"message": str(exc), "above": above})
        if not await self.store.case_exists(request.principal.tenant_id, request.case_id):
            return SubmitResult(Submission.CASE_NOT_FOUND)
        if request.plan is not None:
            try:
                validate_plan(Plan.parse(request.plan), self._catalogue, max_nodes=budgets.max_nodes)
            except PlanInvalid as exc:
                return SubmitResult(Submission.PLAN_INVALID, error=exc.as_dict())
        tenant_tools = (
            self._tenant_tools.get(request.principal.tenant_id, ())
            if self._tenant_tools is not None
            else None
        )
        created = RunCreated(
            at=now(),
            run_id=str(uuid.uuid4()),
            tenant_id=request.principal.tenant_id,
            subject=request.principal.subject,
            scopes=tuple(sorted(request.principal.scopes)),
            case_id=request.case_id,
            goal=request.goal,
            planner=request.planner,
            budgets=budgets,
            proposal=dict(request.plan) if request.plan is not None else None,
            tenant_tools=tuple(tenant_tools) if tenant_tools is not None else None,
            trace=dict(request.trace) if request.trace else None,
        )
        self._creating.add(created.run_id)  # not an orphan between its insert and its driver's start
        try:
            creation, run_id = await self.store.create_run(
                created, idempotency_key=request.idempotency_key, request_hash=request.fingerprint()
            )
            match creation:
                case Creation.CREATED:
                    state = apply(None, created)
                    report(self._metrics, [(None, created, state)])
                    self._start(state, last_seq=1)
                    return SubmitResult(Submission.CREATED, run_id)
                case Creation.REPLAYED:
                    return SubmitResult(Submission.REPLAYED, run_id)
                case Creation.CONFLICT:
                    return SubmitResult(Submission.IDEMPOTENCY_CONFLICT, run_id)
        finally:
            self._creating.discard(created.run_id)

    def _start(self, state: RunState, last_seq: int, recovered: tuple[str, str | None] | None = None) -> None:
        cancel = asyncio.Event()
        task = asyncio.create_task(
            self._driver.drive(state, last_seq=last_seq, cancel=cancel, recovered=recovered),
            name=f"run:{state.run_id}",
        )
        self._runs[state.run_id] = task
        self._cancels[state.run_id] = cancel
        task.add_done_callback(self._forget)

    # ---------------------------------------------------------------- ownership, in the background

    def start_background(self) -> None:
        """Adopt orphaned runs now and keep doing so, renew this owner's leases, relay the outbox."""
        period = self._lease_s / 3
        self._background = [
            asyncio.create_task(self._every(period, self.adopt_orphans), name="adopt-orphans"),
            asyncio.create_task(self._every(period, self._renew_leases), name="renew-leases"),
            asyncio.create_task(self._every(1.0, self._relay.relay_once), name="relay-outbox"),
        ]

    async def _every(self, period_s: float, job: Callable[[], Awaitable[Any]]) -> None:
        while True:
            try:
                await job()
            except asyncio.CancelledError:
                raise
            except Exception:  # a background job must outlive a database outage
                log.warning(
                    "background job %s failed; retrying in %gs", job.__name__, period_s, exc_info=True
                )
            await asyncio.sleep(period_s)

    async def adopt_orphans(self) -> list[str]:
        """Take over live runs nobody drives (a crashed or restarted supervisor's) and resume them."""
        claims = await self._leases.claim_orphans(driving={*self._runs, *self._creating})
        adopted = []
        for claim in claims:
            stored = await self.store.events(claim.run_id)
            if claim.run_id in self._runs or claim.run_id in self._creating:
                continue  # created here while the scan ran: ours already, and already driven
            state = fold(item.event for item in stored)
            log.info("recovering run %s from %s", claim.run_id, claim.previous_owner)
            self._start(state, last_seq=stored[-1].seq, recovered=(self.owner, claim.previous_owner))
            adopted.append(claim.run_id)
        return adopted

    async def _renew_leases(self) -> None:
        for run_id in await self._leases.renew(list(self._runs)):
            log.warning("run %s is no longer ours; stopping its driver here", run_id)
            task = self._runs.get(run_id)
            if task is not None:
                task.cancel()

    def _forget(self, task: asyncio.Task[Any]) -> None:
        run_id = task.get_name().removeprefix("run:")
        self._runs.pop(run_id, None)
        self._cancels.pop(run_id, None)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, LeaseLost):
            log.warning("run %s was taken over by another supervisor: %s", run_id, error)
        elif error is not None:
            # The driver could not even record its failure (the store stayed down): the run stays live in
            # PostgreSQL, and its lease lapses so that a supervisor recovers it.
            log.error("run %s stopped without a terminal record", run_id, exc_info=error)

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the run to reach a terminal state; ``True`` if it has."""
        task = self._runs.get(run_id)
        if task is not None:
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
            return bool(done)
        deadline = time.monotonic() + timeout_s
        while True:  # driven elsewhere (another supervisor, or being recovered): watch the database
            status = await self.store.run_status(run_id)
            if status is None or RunStatus(status).terminal:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))

    async def cancel(self, run_id: str, timeout_s: float = 30.0) -> Cancellation:
        """Cancel a run this process drives: in-flight calls are cancelled and nothing more is dispatched."""
        task = self._runs.get(run_id)
        if task is None:
            status = await self.store.run_status(run_id)
            if status is None:
                return Cancellation.NOT_FOUND
            return Cancellation.ALREADY_FINISHED if RunStatus(status).terminal else Cancellation.NOT_OWNED
        self._cancels[run_id].set()
        await asyncio.wait({task}, timeout=timeout_s)
        status = await self.store.run_status(run_id)
        return Cancellation.CANCELLED if status == RunStatus.CANCELLED else Cancellation.ALREADY_FINISHED

    def active_runs(self) -> int:
        return len(self._runs)

    def reconfigure(
        self,
        *,
        tokens: TaskTokens,
        mcp_url: str,
        limits: Budgets,
        tenant_tools: Mapping[str, tuple[str, ...]] | None,
    ) -> None:
        """New tokens, tool server and limits for what happens from now on."""
        self._limits = limits
        self._tenant_tools = tenant_tools
        self._driver.context.tokens = tokens
        self._driver.context.mcp_url = mcp_url

    async def close_pool(self) -> None:
        await self._pool.close()

    async def close(self) -> None:
        """Stop the background jobs, then cancel every run this process drives, recording each as cancelled."""
        for job in self._background:
            job.cancel()
        for cancel in self._cancels.values():
            cancel.set()
        await asyncio.gather(*self._background, *self._runs.values(), return_exceptions=True)

"""Run submission and ownership in one process: the logic the RunSupervisor actor hosts."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import asyncpg

from actors.executor import ToolExecutor
from actors.runner import RunDriver, now
from actors.store.runs import Creation, RunStore
from dag.budget import Budgets
from dag.contracts import ToolCatalogue
from dag.errors import PlanInvalid
from dag.events import RunCreated
from dag.fingerprint import sha256_hex
from dag.plan import Plan
from dag.policy import Principal
from dag.run_state import apply
from dag.validate import validate_plan
from mcp_server.tokens import TaskTokens
from planner.base import Planner

log = logging.getLogger(__name__)

DEFAULT_GOAL = "Check that the case has every document its policy requires."


@dataclass(frozen=True)
class RunRequest:
    """A request to investigate a case. ``principal`` comes from authentication, the rest from the caller."""

    principal: Principal
    case_id: str
    goal: str = DEFAULT_GOAL
    planner: str = "conformance"
    plan: Mapping[str, Any] | None = None
    budgets: Budgets | None = None
    idempotency_key: str | None = None

    def fingerprint(self) -> str:
        """What makes two requests "the same" for an idempotency key."""
        return sha256_hex(
            {
                "case_id": self.case_id,
                "goal": self.goal,
                "planner": self.planner,
                "plan": self.plan,
                "budgets": self.budgets.model_dump() if self.budgets else None,
            }
        )


class Submission(StrEnum):
    CREATED = "created"
    REPLAYED = "replayed"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    CASE_NOT_FOUND = "case_not_found"
    UNKNOWN_PLANNER = "unknown_planner"
    PLAN_INVALID = "plan_invalid"


@dataclass(frozen=True)
class SubmitResult:
    outcome: Submission
    run_id: str | None = None
    error: dict[str, Any] | None = None


class RunService:
    """Creates runs (once per idempotency key), drives them in the background, and waits on them."""

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
    ) -> None:
        self.store = RunStore(pool)
        self._catalogue = catalogue
        self._planners = planners
        self._limits = limits
        self._driver = RunDriver(
            sink=self.store,
            executor=executor,
            catalogue=catalogue,
            planners=planners,
            tokens=tokens,
            mcp_url=mcp_url,
        )
        self._runs: dict[str, asyncio.Task[Any]] = {}

    async def submit(self, request: RunRequest) -> SubmitResult:
        if request.planner not in self._planners:
            return SubmitResult(
                Submission.UNKNOWN_PLANNER,
                error={"planner": request.planner, "known": sorted(self._planners)},
            )
        if not await self.store.case_exists(request.principal.tenant_id, request.case_id):
            return SubmitResult(Submission.CASE_NOT_FOUND)
        budgets = self._limits.lowered_by(request.budgets)
        if request.plan is not None:
            try:
                validate_plan(Plan.parse(request.plan), self._catalogue, max_nodes=budgets.max_nodes)
            except PlanInvalid as exc:
                return SubmitResult(Submission.PLAN_INVALID, error=exc.as_dict())
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
        )
        creation, run_id = await self.store.create_run(
            created, idempotency_key=request.idempotency_key, request_hash=request.fingerprint()
        )
        match creation:
            case Creation.CREATED:
                self._start(apply(None, created))
                return SubmitResult(Submission.CREATED, run_id)
            case Creation.REPLAYED:
                return SubmitResult(Submission.REPLAYED, run_id)
            case Creation.CONFLICT:
                return SubmitResult(Submission.IDEMPOTENCY_CONFLICT, run_id)

    def _start(self, state: Any) -> None:
        task = asyncio.create_task(self._driver.drive(state, last_seq=1), name=f"run:{state.run_id}")
        self._runs[state.run_id] = task
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        run_id = task.get_name().removeprefix("run:")
        self._runs.pop(run_id, None)
        if not task.cancelled() and task.exception() is not None:
            # The driver could not even record its failure (the store is down): the run stays unfinished
            # in PostgreSQL until it is recovered.
            log.error("run %s stopped without a terminal record", run_id, exc_info=task.exception())

    async def wait(self, run_id: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a run this process drives; ``True`` if it is no longer running here."""
        task = self._runs.get(run_id)
        if task is None:
            return True
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        return bool(done)

    def active_runs(self) -> int:
        return len(self._runs)

    async def close(self) -> None:
        for task in list(self._runs.values()):
            task.cancel()
        await asyncio.gather(*self._runs.values(), return_exceptions=True)

"""A supervisor's runs as one service (``RunService``): what the RunSupervisor actor hosts. It composes the parts
named for their jobs: ``Intake`` admits new runs and ``Continuations`` continued ones, ``Turns`` drives the runs
owned here, ``Ownership`` takes runs over and gives them up, ``Chores`` keeps the background jobs; the service
records what is admitted, and waits on, cancels and hands over what it owns."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import asyncpg

from actors.observe.metrics import report
from actors.run.asking import QuestionGate
from actors.run.children import ChildRuns
from actors.run.chores import Chores
from actors.run.context import Interruption, Parked
from actors.run.continuation import Continuations
from actors.run.deps import RunDeps
from actors.run.driver import RunDriver
from actors.run.intake import Intake, NewRun, Rules
from actors.run.operate import Operate
from actors.run.ownership import Ownership
from actors.run.reviewing import ReviewGate
from actors.run.submission import (
    MAX_ACTIVE_RUNS,
    Cancellation,
    ContinueRequest,
    Drained,
    RunRequest,
    Submission,
    SubmitResult,
)
from actors.run.tool_questions import ToolQuestionGate
from actors.store.decisions import DecisionWakeups
from actors.store.operations import OperationStore
from actors.store.outbox import LogSink, OutboxRelay, OutboxSink
from actors.store.ownership import Leases
from actors.store.questions import QuestionStore
from actors.store.resilience import REQUEST_WINDOW_S, RUN_WINDOW_S, DatabaseUnavailable
from actors.store.reviews import ReviewStore
from actors.store.runs import Creation, RunStore
from actors.store.tool_questions import ToolQuestionStore
from actors.toolsets.config import Toolsets
from dag.budget import Budgets
from dag.policy import TenantPolicy
from dag.run_state import apply
from dag.states import RunStatus
from dag.tokens import TaskTokens

log = logging.getLogger(__name__)

_POLL_S = 0.1


class RunService:
    """Creates runs (once per idempotency key), drives them in the background, waits on and cancels them."""

    def __init__(
        self,
        deps: RunDeps,
        *,
        pool: asyncpg.Pool,
        limits: Budgets,
        defaults: Budgets | None = None,
        tenant_tools: Mapping[str, tuple[str, ...]] | None = None,
        tenant_policies: Mapping[str, TenantPolicy] | None = None,
        owner: str = "raydag-local",
        lease_s: float = 15.0,
        outbox_sink: OutboxSink | None = None,
        unavailable_planners: Mapping[str, str] | None = None,
        toolsets: Toolsets | None = None,
        listed: asyncio.Event | None = None,
        max_active_runs: int = MAX_ACTIVE_RUNS,
        toolset_planner: str | None = None,
        decisions: DecisionWakeups | None = None,
    ) -> None:
        """``deps``: what every run shares, handed to the driver and its rounds as it is. ``toolsets`` declare
        the resource checks of the catalogue's servers (none: the policy alone). ``listed`` is set once every
        toolset server has been tried: runs are adopted only then (``None``: at once). ``max_active_runs``: how
        many runs are driven at once; the others wait their turn, oldest first. ``decisions`` wakes runs waiting
        on a person when a decision is written (none: they read their rows every 250 ms,
        ``UNHEARD_READ_EVERY_S``)."""
        self._deps = deps
        self.owner = owner
        self.store = RunStore(pool, owner=owner, lease_s=lease_s)
        operations = OperationStore(pool)
        reviews = ReviewStore(pool)
        questions = QuestionStore(pool)
        decisions = decisions if decisions is not None else DecisionWakeups(None)
        actor = f"supervisor:{owner}"
        self._driver = RunDriver(
            deps,
            sink=self.store,
            operate=Operate(operations, actor=actor, decisions=decisions, retry=deps.retry),
            review=ReviewGate(reviews, actor=actor),
            questions=QuestionGate(questions, actor=actor),
            tool_questions=ToolQuestionGate(ToolQuestionStore(pool), actor=actor, decisions=decisions),
        )
        self._intake = Intake(
            deps,
            rules=Rules(limits, defaults, tenant_tools, tenant_policies or {}),
            toolsets=toolsets,
            database=pool,
            unavailable_planners=unavailable_planners,
            toolset_planner=toolset_planner,
        )
        self._continuations = Continuations(
            deps, intake=self._intake, store=self.store, operations=operations
        )
        self._driver.children = ChildRuns(
            intake=self._intake,
            continuations=self._continuations,
            store=self.store,
            create=self._create,
            wait=lambda run_id, timeout_s, until_parked: self.wait(
                run_id, timeout_s, until_parked=until_parked, window_s=RUN_WINDOW_S
            ),
            cancel=self.cancel,
        )
        self._ownership = Ownership(
            self._driver,
            owner=owner,
            store=self.store,
            leases=Leases(pool, owner, lease_s),
            operations=operations,
            reviews=reviews,
            questions=questions,
            decisions=decisions,
            serving=self._intake.served_tools,
            planning=self._intake.planner_tools.keys(),
            listed=listed,
            max_active_runs=max_active_runs,
        )
        self._turns = self._ownership.turns
        relay = OutboxRelay(pool, outbox_sink if outbox_sink is not None else LogSink())
        self._chores = Chores(
            deps,
            ownership=self._ownership,
            relay=relay,
            operations=operations,
            decisions=decisions,
            lease_s=lease_s,
        )

    async def submit(self, request: RunRequest) -> SubmitResult:
        """Admit ``request`` and start driving it (``Intake``), or refuse it."""
        try:
            if self._driver.handover.is_set():
                return SubmitResult(Submission.SHUTTING_DOWN)
            admitted = await self._intake.new_run(request)
            return admitted if isinstance(admitted, SubmitResult) else await self._create(admitted)
        except DatabaseUnavailable as exc:
            log.warning("refusing a run: %s", exc)
            return SubmitResult(Submission.UNAVAILABLE, error={"message": str(exc)})

    async def continue_run(self, request: ContinueRequest) -> SubmitResult:
        """Continue a run that stopped (``Continuations``). Once per run: a second request is the first's
        continuation, replayed (or refused if it asked for something else)."""
        try:
            if self._driver.handover.is_set():
                return SubmitResult(Submission.SHUTTING_DOWN)
            admitted = await self._continuations.new_run(request)
            return admitted if isinstance(admitted, SubmitResult) else await self._create(admitted)
        except DatabaseUnavailable as exc:
            log.warning("refusing a continuation: %s", exc)
            return SubmitResult(Submission.UNAVAILABLE, error={"message": str(exc)})

    async def _create(self, new: NewRun) -> SubmitResult:
        """Record the run (once per idempotency key, or per run continued) and start driving it."""
        created, continued = new.created, new.continued
        with self._turns.claiming(created.run_id):  # not an orphan between its insert and its driver's start
            creation, run_id = await self.store.create_run(
                created,
                idempotency_key=new.idempotency_key,
                request_hash=new.request_hash,
                tools=new.tools,
                continued=continued,
            )
            match creation:
                case Creation.CREATED:
                    state = apply(None, created)
                    report(self._deps.metrics, [(None, created, state)])
                    if continued is not None:
                        state = apply(state, continued)
                    self._turns.start(state, last_seq=2 if continued else 1, checked_plan=new.checked_plan)
                    return SubmitResult(Submission.CREATED, run_id)
                case Creation.REPLAYED:
                    return SubmitResult(Submission.REPLAYED, run_id)
                case Creation.CONFLICT if continued is not None:
                    return SubmitResult(Submission.ALREADY_CONTINUED, run_id)
                case Creation.CONFLICT:
                    return SubmitResult(Submission.IDEMPOTENCY_CONFLICT, run_id)

    # ---------------------------------------------------------------- ownership, in the background

    def start_background(self) -> None:
        """Adopt orphaned runs now and keep doing so, renew this owner's leases, relay the outbox, settle
        operations no run drives, and listen for people's decisions (``Chores``)."""
        self._chores.start()

    async def adopt_orphans(self) -> list[str]:
        """Take over live runs nobody drives (a crashed or restarted supervisor's) and resume them."""
        return await self._ownership.adopt_orphans()

    async def wait(
        self,
        run_id: str,
        timeout_s: float,
        *,
        until_waiting: bool = False,
        until_parked: bool = False,
        window_s: float = REQUEST_WINDOW_S,
    ) -> bool:
        """Wait up to ``timeout_s`` for the run to reach a terminal state (``until_waiting``: or to wait for a
        person; ``until_parked``: or to be parked); ``True`` if it has. A run driven here is watched in memory;
        one driven elsewhere (another supervisor, being recovered) or parked, in the database, riding out an
        outage for ``window_s`` (a parent waiting on its child: ``RUN_WINDOW_S``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            task = self._turns.runs.get(run_id)
            if task is not None and not until_waiting:
                done, _ = await asyncio.wait({task}, timeout=left)
                if not done:
                    return False
                if task.cancelled() or not isinstance(task.exception(), Parked) or until_parked:
                    return True  # it ended here (finished, handed over, lost, parked): nothing more here
                task = None  # parked: it waits for people, and its row says when it ends
            standing = await self.store.run_standing(run_id, window_s=window_s)
            if standing is None or RunStatus(standing[0]).terminal:
                return True
            status, parked = standing
            if (until_waiting and status == RunStatus.WAITING) or (until_parked and parked):
                return True
            if time.monotonic() >= deadline:
                return False
            if task is not None and not task.done():
                await asyncio.wait({task}, timeout=min(_POLL_S, left))
            else:
                await asyncio.sleep(min(_POLL_S, left))

    async def cancel(
        self, run_id: str, timeout_s: float = 30.0, *, because: Interruption | None = None
    ) -> Cancellation:
        """Cancel a run this process drives: in-flight calls are cancelled and nothing more is dispatched. It
        stops for ``because`` (its parent run's stop), else as cancelled."""
        task = self._turns.runs.get(run_id)
        if task is None and await self._ownership.wake(run_id, cancel=True, because=because):  # parked
            task = self._turns.runs.get(run_id)
        if task is None:
            status = await self.store.run_status(run_id)
            if status is None:
                return Cancellation.NOT_FOUND
            return Cancellation.ALREADY_FINISHED if RunStatus(status).terminal else Cancellation.NOT_OWNED
        self._turns.cancel(run_id, because)
        await asyncio.wait({task}, timeout=timeout_s)
        status = await self.store.run_status(run_id)
        return Cancellation.CANCELLED if status == RunStatus.CANCELLED else Cancellation.ALREADY_FINISHED

    def active_runs(self) -> int:
        """Runs this process owns: driven, or waiting for their turn."""
        return self._turns.active()

    def waiting_runs(self) -> int:
        """Runs this process owns that wait for a turn to be driven (``max_active_runs`` are)."""
        return self._turns.waiting()

    @property
    def handing_over(self) -> bool:
        """Whether ``drain`` has begun: new runs are refused from then on."""
        return self._driver.handover.is_set()

    async def drain(self, grace_s: float) -> Drained:
        """Hand every run over before the process stops: refuse new runs, dispatch nothing more, let the calls
        in flight land (for up to ``grace_s``) and record them, then stop driving, leaving the runs live.

        Leases stay as they are: a supervisor of the same name (the one that restarts in this one's place)
        resumes the runs at once; any other takes them over when their leases lapse. Calls still out after
        ``grace_s`` are abandoned; the resuming supervisor dispatches them again (they are read-only).
        """
        self._driver.handover.set()
        runs = dict(self._turns.runs)
        pending: set[asyncio.Task[Any]] = set()
        if runs:
            _, pending = await asyncio.wait(set(runs.values()), timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        await asyncio.gather(*self._chores.cancel(), return_exceptions=True)
        abandoned = sorted(run_id for run_id, task in runs.items() if task in pending)
        log.info(
            "handed over %d runs (%d of them with calls abandoned after %gs)",
            len(runs),
            len(abandoned),
            grace_s,
        )
        return Drained(handed_over=tuple(sorted(runs)), abandoned=tuple(abandoned))

    def reconfigure(
        self,
        *,
        tokens: TaskTokens,
        mcp_url: str,
        limits: Budgets,
        defaults: Budgets | None,
        tenant_tools: Mapping[str, tuple[str, ...]] | None,
        tenant_policies: Mapping[str, TenantPolicy],
    ) -> None:
        """New tokens, tool server, limits and tenants' rules for what happens from now on."""
        self._intake.rules = Rules(limits, defaults, tenant_tools, tenant_policies)
        self._deps.endpoint.tokens = tokens
        self._deps.endpoint.url = mcp_url

    async def close(self) -> None:
        """Stop the background jobs, then cancel every run this process drives, recording each as cancelled."""
        jobs = self._chores.cancel()
        self._turns.cancel_all()
        await asyncio.gather(*jobs, *self._turns.runs.values(), return_exceptions=True)

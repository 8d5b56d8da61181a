"""Run submission, ownership in this process, waiting and cancellation: what the RunSupervisor actor hosts."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import asyncpg

from actors.observe.metrics import report
from actors.run.approvals import Person
from actors.run.asking import QuestionGate
from actors.run.context import Parked
from actors.run.deps import RunDeps
from actors.run.driver import RunDriver
from actors.run.operate import Operate, sweep
from actors.run.recorder import now
from actors.run.resource_check import ResourceCheckUnavailable, checks_for, resource_checks
from actors.run.reviewing import ReviewGate
from actors.run.submission import (
    MAX_ACTIVE_RUNS,
    Cancellation,
    ContinueRequest,
    Drained,
    RunRequest,
    Submission,
    SubmitResult,
    refused_submission,
)
from actors.run.tool_questions import ToolQuestionGate
from actors.run.turns import Turns
from actors.store.decisions import DecisionWakeups
from actors.store.operations import Operation, OperationStore
from actors.store.outbox import LogSink, OutboxRelay, OutboxSink
from actors.store.ownership import Leases
from actors.store.questions import QuestionStore
from actors.store.resilience import DatabaseUnavailable
from actors.store.reviews import ReviewStore
from actors.store.runs import Creation, RunStore
from actors.store.tool_questions import ToolQuestionStore
from actors.toolsets.config import Toolsets
from actors.toolsets.pinning import run_pin
from dag.admission import Offer, OverLimits, RunAdmitted, admit_run
from dag.budget import BudgetAboveLimit, Budgets
from dag.continuation import (
    ContinueRefusal,
    Ledgered,
    carried_operations,
    carried_outputs,
    continue_refusal,
    continued_answers,
    continued_budgets,
)
from dag.contracts import Risk, ToolContract
from dag.events import RunContinued, RunCreated
from dag.operations import OperationState
from dag.plan import Plan
from dag.policy import Principal, TenantPolicy
from dag.questions import QuestionState
from dag.review import ReviewState
from dag.run_state import RunState, apply, fold
from dag.states import RunStatus
from dag.tokens import TaskTokens
from planner.base import default_model, required_tools

if TYPE_CHECKING:
    from actors.calls.call import ToolOutcome

log = logging.getLogger(__name__)

_POLL_S = 0.1
_OPERATION_WAITS = frozenset({OperationState.AWAITING_APPROVAL, OperationState.UNKNOWN})
"""The states in which an operation waits for a person (an approval; a resolution)."""
SWEEP_S = 10.0
"""How often a supervisor settles the writes of ended runs and reports the unknown ones."""


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
        the resource checks of the catalogue's servers (none: the policy alone). ``max_active_runs``: how many
        runs are driven at once; the others wait their turn, oldest first. ``decisions`` wakes runs waiting on
        a person when a decision is written (none: they read their rows every 250 ms,
        ``UNHEARD_READ_EVERY_S``)."""
        self._deps = deps
        self._pool = pool
        self._toolsets = toolsets
        self._listed = listed
        """Set once every toolset server has been tried: runs are adopted only then (``None``: at once)."""
        self.owner = owner
        self.store = RunStore(pool, owner=owner, lease_s=lease_s)
        self._operations = OperationStore(pool)
        self._reviews = ReviewStore(pool)
        self._questions = QuestionStore(pool)
        self._leases = Leases(pool, owner, lease_s)
        self._relay = OutboxRelay(pool, outbox_sink if outbox_sink is not None else LogSink())
        self._lease_s = lease_s
        self._decisions = decisions if decisions is not None else DecisionWakeups(None)
        self._decisions.unwatched = self._woken_by_decision
        self._unavailable_planners = dict(unavailable_planners or {})
        self._toolset_planner = toolset_planner
        """The toolsets' own planner's name: the planner of a run that names none and gives no plan."""
        self._planner_tools = {name: required_tools(planner) for name, planner in deps.planners.items()}
        """Each planner offered, with the tools it cannot plan or judge a run without."""
        self._planner_models = {
            name: model
            for name, planner in deps.planners.items()
            if (model := default_model(planner)) is not None
        }
        """Each planner that plans with a model, with its default: a run may name another its tenant allows."""
        self._limits = limits
        self._defaults = defaults
        self._tenant_tools = tenant_tools
        self._tenant_policies: Mapping[str, TenantPolicy] = tenant_policies or {}
        self._driver = RunDriver(
            deps,
            sink=self.store,
            operate=Operate(
                self._operations, actor=f"supervisor:{owner}", decisions=self._decisions, retry=deps.retry
            ),
            review=ReviewGate(self._reviews, actor=f"supervisor:{owner}"),
            questions=QuestionGate(self._questions, actor=f"supervisor:{owner}"),
            tool_questions=ToolQuestionGate(
                ToolQuestionStore(pool), actor=f"supervisor:{owner}", decisions=self._decisions
            ),
        )
        self._resource_checks = (
            resource_checks(toolsets, deps.catalogue, database=pool, call_tool=self._call_for_check)
            if toolsets is not None
            else {}
        )
        self._turns = Turns(self._driver, max_active_runs=max_active_runs, parked=self._parked)
        self._background: list[asyncio.Task[None]] = []
        self._waking: set[asyncio.Task[bool]] = set()
        """Wake-ups of parked runs under way (kept referenced until they end)."""

    async def submit(self, request: RunRequest) -> SubmitResult:
        try:
            return await self._submit(request)
        except DatabaseUnavailable as exc:
            log.warning("refusing a run: %s", exc)
            return SubmitResult(Submission.UNAVAILABLE, error={"message": str(exc)})

    async def _submit(self, request: RunRequest) -> SubmitResult:
        if self._driver.handover.is_set():
            return SubmitResult(Submission.SHUTTING_DOWN)
        tenant_tools = (
            self._tenant_tools.get(request.principal.tenant_id, ())
            if self._tenant_tools is not None
            else None
        )
        unlisted = self._unlisted_tools(tenant_tools)
        admission = admit_run(
            planner=request.planner,
            plan=request.plan,
            resource=request.resource,
            budgets=request.budgets,
            offer=self._offer(request.principal.tenant_id, tenant_tools, unlisted),
            stage=request.stage,
            model=request.model,
        )
        if not isinstance(admission, RunAdmitted):
            return refused_submission(admission)
        refused = await self._check_resource(request.principal, request.resource, admission)
        if refused is not None:
            return refused
        created = RunCreated(
            at=now(),
            run_id=str(uuid.uuid4()),
            tenant_id=request.principal.tenant_id,
            subject=request.principal.subject,
            scopes=tuple(sorted(request.principal.scopes)),
            resource=dict(request.resource),
            goal=request.goal,
            stage=request.stage,
            planner=admission.planner,
            budgets=admission.budgets,
            proposal=dict(request.plan) if request.plan is not None else None,
            tenant_tools=tuple(tenant_tools) if tenant_tools is not None else None,
            review=request.review
            or self._tenant_policies.get(request.principal.tenant_id, TenantPolicy()).plan_review,
            model=request.model,
            trace=dict(request.trace) if request.trace else None,
            tool_pins={
                name: run_pin(self._deps.pins[name])
                for name in sorted(admission.tools)
                if name in self._deps.pins
            }
            or None,
        )
        return await self._create(
            created,
            idempotency_key=request.idempotency_key,
            request_hash=replace(request, planner=admission.planner).fingerprint(),
            tools={*admission.tools, *unlisted},
            checked_plan=admission.plan,
        )

    def _offer(
        self, tenant_id: str, tenant_tools: Sequence[str] | None, unlisted: Mapping[str, frozenset[str]]
    ) -> Offer:
        """What a run of ``tenant_id``, granted ``tenant_tools``, is offered now: admission weighs a request by
        it. Its budgets' defaults are its tenant's where its policy names them, else the server's."""
        defaults = self._defaults
        policy = self._tenant_policies.get(tenant_id, TenantPolicy())
        tenant_budgets = policy.budgets
        if tenant_budgets is not None:
            defaults = self._limits.granted(tenant_budgets, defaults=defaults)
        return Offer(
            catalogue=self._deps.catalogue,
            limits=self._limits,
            defaults=defaults,
            planners=self._planner_tools,
            unavailable_planners=self._unavailable_planners,
            toolset_planner=self._toolset_planner,
            withdrawn=self._deps.withdrawn,
            unlisted=unlisted,
            granted=tenant_tools,
            planner_models=self._planner_models,
            models=policy.models,
        )

    async def _check_resource(
        self, principal: Principal, resource: Mapping[str, str], admission: RunAdmitted
    ) -> SubmitResult | None:
        """The toolsets' resource checks of the run's tools: ``None`` if each allows ``principal`` the
        resource, else the refusal (one answer for an unknown resource and another tenant's)."""
        for check in checks_for(self._resource_checks, list(admission.checked_by)):
            try:
                answer = await check(principal, resource)
            except ResourceCheckUnavailable as exc:
                return SubmitResult(Submission.RESOURCE_CHECK_UNAVAILABLE, error={"message": str(exc)})
            if not answer.allowed:
                return SubmitResult(
                    Submission.RESOURCE_NOT_FOUND, error={"problem": answer.problem, "detail": answer.detail}
                )
        return None

    async def _create(
        self,
        created: RunCreated,
        *,
        idempotency_key: str | None,
        request_hash: str,
        tools: Collection[str] | None,
        checked_plan: Plan | None,
        continued: RunContinued | None = None,
    ) -> SubmitResult:
        """Record the run (once per idempotency key, or per run continued) and start driving it."""
        with self._turns.claiming(created.run_id):  # not an orphan between its insert and its driver's start
            creation, run_id = await self.store.create_run(
                created,
                idempotency_key=idempotency_key,
                request_hash=request_hash,
                tools=tools,
                continued=continued,
            )
            match creation:
                case Creation.CREATED:
                    state = apply(None, created)
                    report(self._deps.metrics, [(None, created, state)])
                    if continued is not None:
                        state = apply(state, continued)
                    self._turns.start(state, last_seq=2 if continued else 1, checked_plan=checked_plan)
                    return SubmitResult(Submission.CREATED, run_id)
                case Creation.REPLAYED:
                    return SubmitResult(Submission.REPLAYED, run_id)
                case Creation.CONFLICT if continued is not None:
                    return SubmitResult(Submission.ALREADY_CONTINUED, run_id)
                case Creation.CONFLICT:
                    return SubmitResult(Submission.IDEMPOTENCY_CONFLICT, run_id)

    async def continue_run(self, request: ContinueRequest) -> SubmitResult:
        """Continue a run that stopped (``dag.continuation``): a new run over the earlier run's principal,
        resource, stage, planner and pinned tools, carrying over what succeeded in it. Once per run: a second
        request is the first's continuation, replayed (or refused if it asked for something else)."""
        try:
            return await self._continue(request)
        except DatabaseUnavailable as exc:
            log.warning("refusing a continuation: %s", exc)
            return SubmitResult(Submission.UNAVAILABLE, error={"message": str(exc)})

    async def _continue(self, request: ContinueRequest) -> SubmitResult:
        if self._driver.handover.is_set():
            return SubmitResult(Submission.SHUTTING_DOWN)
        row = await self.store.run_row(request.principal, request.run_id)
        if row is None:
            return SubmitResult(Submission.RUN_NOT_FOUND)
        status = RunStatus(row["status"])
        match continue_refusal(status):
            case ContinueRefusal.NOT_FINISHED:
                return SubmitResult(Submission.RUN_NOT_FINISHED, error={"run_status": status.value})
            case ContinueRefusal.NOT_CONTINUABLE:
                error = {"run_status": status.value, "stop_reason": row["stop_reason"]}
                return SubmitResult(Submission.RUN_NOT_CONTINUABLE, error=error)
        if row["pruned_at"] is not None:
            return SubmitResult(Submission.HISTORY_PRUNED)
        earlier = fold(item.event for item in await self.store.events(str(row["run_id"])))
        principal = earlier.principal
        tenant_tools = (
            self._tenant_tools.get(principal.tenant_id, ()) if self._tenant_tools is not None else None
        )
        unlisted = self._unlisted_tools(tenant_tools)
        admission = admit_run(
            planner=earlier.planner,
            plan=earlier.proposal,
            resource=earlier.resource,
            budgets=None,
            offer=self._offer(principal.tenant_id, tenant_tools, unlisted),
            stage=earlier.stage,
            model=earlier.model,
        )
        if not isinstance(admission, RunAdmitted):
            return refused_submission(admission)
        try:
            budgets = continued_budgets(earlier.budgets, self._limits, request.budgets)
        except BudgetAboveLimit as exc:
            return refused_submission(OverLimits(exc))
        refused = await self._check_resource(principal, earlier.resource, admission)
        if refused is not None:
            return refused
        by = Person(request.principal.tenant_id, request.principal.subject).actor
        created = RunCreated(
            at=now(),
            run_id=str(uuid.uuid4()),
            tenant_id=principal.tenant_id,
            subject=principal.subject,
            scopes=tuple(sorted(principal.scopes)),
            resource=dict(earlier.resource),
            goal=request.goal or earlier.goal,
            stage=earlier.stage,
            planner=admission.planner,
            budgets=budgets,
            proposal=dict(earlier.proposal) if earlier.proposal is not None else None,
            tenant_tools=tuple(tenant_tools) if tenant_tools is not None else None,
            review=earlier.review
            or self._tenant_policies.get(principal.tenant_id, TenantPolicy()).plan_review,
            model=earlier.model,
            trace=dict(request.trace) if request.trace else None,
            tool_pins=dict(earlier.tool_pins) if earlier.tool_pins is not None else None,
        )
        continued = RunContinued(
            at=created.at,
            continues=earlier.run_id,
            by=by,
            outputs=carried_outputs(earlier, self._is_read),
            operations=carried_operations(await self._ledgered(earlier)),
            answers=continued_answers(earlier, request.answer, by),
        )
        return await self._create(
            created,
            continued=continued,
            idempotency_key=None,
            request_hash=request.fingerprint(),
            tools=row["tools"],
            checked_plan=admission.plan,
        )

    def _is_read(self, tool: str) -> bool:
        contract = self._deps.catalogue.get(tool)
        return contract is not None and contract.risk is Risk.READ_ONLY

    async def _ledgered(self, earlier: RunState) -> list[Ledgered]:
        """The writes of ``earlier``'s run, and those it took over itself, as the ledger holds them now."""
        rows = await self._operations.of_run(earlier.run_id)
        seen = {row.operation_id for row in rows}
        for operation_id in earlier.carried_operations.values():
            if operation_id not in seen and (row := await self._operations.get(operation_id)) is not None:
                rows.append(row)
        return [Ledgered(row.tool, row.args_hash, row.operation_id, row.state) for row in rows]

    def _served_tools(self) -> set[str]:
        """Every tool this supervisor is declared to serve, its server listed now or not."""
        declared = () if self._toolsets is None else self._toolsets.servers
        return {*self._deps.catalogue, *(name for server in declared for name in server.tools)}

    def _unlisted_tools(self, tenant_tools: Sequence[str] | None) -> dict[str, frozenset[str]]:
        """The declared tools not offered now because their server has not been listed, with the resource
        keys their overlays bind (known from the toolsets file alone)."""
        if self._toolsets is None:
            return {}
        return {
            name: frozenset(binding.resource for binding in overlay.run_bound.values())
            for server in self._toolsets.servers
            for name, overlay in server.tools.items()
            if name in self._deps.withdrawn
            and name not in self._deps.catalogue
            and (tenant_tools is None or name in tenant_tools)
        }

    async def _call_for_check(
        self, principal: Principal, resource: Mapping[str, str], contract: ToolContract, args: dict[str, Any]
    ) -> ToolOutcome:
        """One call of a resource check's tool, with a token minted for the requester as a node's would be."""
        from actors.calls.call import ToolCall

        deps = self._deps
        check_id = f"resource-check-{uuid.uuid4()}"
        url, tokens = deps.destination(contract)
        call = ToolCall(
            run_id=check_id,
            node_id="check",
            attempt=1,
            tool=contract.name,
            args=args,
            mcp_url=url,
            token=tokens.mint(
                subject=principal.subject,
                tenant_id=principal.tenant_id,
                task_id=f"{check_id}/check/1",
                resource=resource,
                tool=contract.name,
                scopes={contract.scope},
            )
            if tokens is not None
            else "",
            timeout_s=contract.timeout_s,
            protocol=deps.protocol,
            server=contract.server,
        )
        async with asyncio.timeout(contract.timeout_s + deps.call_slack_s):
            return await deps.executor.run(call)

    # ---------------------------------------------------------------- ownership, in the background

    def start_background(self) -> None:
        """Adopt orphaned runs now and keep doing so, renew this owner's leases, relay the outbox, settle
        operations no run drives, and listen for people's decisions."""
        period = self._lease_s / 3
        self._background = [
            asyncio.create_task(self._every(period, self.adopt_orphans), name="adopt-orphans"),
            asyncio.create_task(self._every(period, self._renew_leases), name="renew-leases"),
            asyncio.create_task(self._every(1.0, self._relay.relay_once), name="relay-outbox"),
            asyncio.create_task(self._every(SWEEP_S, self.sweep_operations), name="sweep-operations"),
            asyncio.create_task(self._decisions.keep_listening(), name="listen-for-decisions"),
        ]

    async def sweep_operations(self) -> None:
        """Settle the writes of runs that ended with them out or unknown (``operate.sweep``), and report how
        many are unknown and since when."""

        async def read(row: Operation, contract: ToolContract, args: dict[str, Any]) -> ToolOutcome:
            principal = Principal(row.tenant_id, row.subject, frozenset({contract.scope}))
            return await self._call_for_check(principal, row.resource, contract, args)

        await sweep(
            self._operations,
            self._deps.catalogue,
            read,
            actor=f"supervisor:{self.owner}",
            call_limit_s=self._deps.call_limit_s,
        )
        self._deps.metrics.unknown_operations(*await self._operations.unknown())

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
        if self._driver.handover.is_set():
            return []  # stopping: adopting now would only hand the runs over again
        if self._listed is not None and not self._listed.is_set():
            return []  # a run resumed before its servers were tried would find their tools withdrawn
        claims = await self._leases.claim_orphans(
            driving=self._turns.owned(),
            serving=self._served_tools(),
            planning=self._planner_tools.keys(),
        )
        adopted = []
        for claim in claims:
            stored = await self.store.events(claim.run_id)
            if self._turns.owns(claim.run_id):
                continue  # created here while the scan ran: ours already, and already driven
            state = fold(item.event for item in stored)
            log.info("recovering run %s from %s", claim.run_id, claim.previous_owner)
            self._turns.start(state, last_seq=stored[-1].seq, recovered=(self.owner, claim.previous_owner))
            adopted.append(claim.run_id)
        return adopted

    async def _renew_leases(self) -> None:
        for run_id in await self._leases.renew(list(self._turns.runs)):
            log.warning("run %s is no longer ours; stopping its driver here", run_id)
            task = self._turns.runs.get(run_id)
            if task is not None:
                task.cancel()

    # ---------------------------------------------------------------- parked runs

    def _parked(self, run_id: str, waits: tuple[str, ...]) -> None:
        """``run_id`` stopped being driven here to wait for people: wake it if one of ``waits`` was decided
        already."""
        self._soon(self._wake_if_decided(run_id, waits))

    def _woken_by_decision(self, run_id: str) -> None:
        """A decision about ``run_id`` was written, and no run of this process waits on it: if the run is
        parked, wake it here (the first supervisor to claim it does)."""
        if not self._turns.owns(run_id):
            self._soon(self.wake(run_id))

    def _soon(self, work: Awaitable[bool]) -> None:
        task = asyncio.ensure_future(work)
        self._waking.add(task)
        task.add_done_callback(self._waking.discard)

    async def _wake_if_decided(self, run_id: str, waits: Sequence[str]) -> bool:
        """Wake a run just parked if one of ``waits`` was decided before its parking was stored (the trigger
        that marks a parked run due could not see it yet)."""
        for wait in waits:
            kind, _, key = wait.partition(":")
            match kind:
                case "operation":
                    operation = await self._operations.get(key)
                    decided = operation is not None and operation.state not in _OPERATION_WAITS
                case "review":
                    review = await self._reviews.current(run_id, int(key))
                    decided = review is not None and review.state is not ReviewState.AWAITING
                case "question":
                    question = await self._questions.get(run_id, int(key))
                    decided = question is not None and question.state is not QuestionState.AWAITING
                case _:
                    raise AssertionError(f"a run parked on {wait!r}")
            if decided:
                return await self.wake(run_id)
        return False

    async def wake(self, run_id: str, *, cancel: bool = False) -> bool:
        """Claim a parked run and drive it again here (``cancel``: to record its cancellation); ``False`` if
        it is not parked (any more), or this supervisor is stopping."""
        if self._driver.handover.is_set() or self._turns.owns(run_id):
            return False
        with self._turns.claiming(run_id):  # claimed and not driven yet: no orphan of this owner's scan
            try:
                claimed = await self._leases.claim_parked(
                    run_id, serving=self._served_tools(), planning=self._planner_tools.keys()
                )
            except DatabaseUnavailable:
                log.warning("could not wake run %s now; the orphan scan will", run_id)
                return False
            if not claimed:
                return False
            stored = await self.store.events(run_id)
            self._turns.start(
                fold(item.event for item in stored), last_seq=stored[-1].seq, recovered=(self.owner, None)
            )
        if cancel:
            self._turns.cancel(run_id)
        return True

    async def wait(self, run_id: str, timeout_s: float, *, until_waiting: bool = False) -> bool:
        """Wait up to ``timeout_s`` for the run to reach a terminal state (``until_waiting``: or to wait for a
        person); ``True`` if it has. A run driven here is watched in memory; one driven elsewhere (another
        supervisor, being recovered) or parked, in the database."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            task = self._turns.runs.get(run_id)
            if task is not None and not until_waiting:
                done, _ = await asyncio.wait({task}, timeout=left)
                if not done:
                    return False
                if task.cancelled() or not isinstance(task.exception(), Parked):
                    return True  # it ended here (finished, handed over, lost): nothing more to wait for here
                task = None  # parked: it waits for people, and its row says when it ends
            status = await self.store.run_status(run_id)
            if status is None or RunStatus(status).terminal:
                return True
            if until_waiting and status == RunStatus.WAITING:
                return True
            if time.monotonic() >= deadline:
                return False
            if task is not None and not task.done():
                await asyncio.wait({task}, timeout=min(_POLL_S, left))
            else:
                await asyncio.sleep(min(_POLL_S, left))

    async def cancel(self, run_id: str, timeout_s: float = 30.0) -> Cancellation:
        """Cancel a run this process drives: in-flight calls are cancelled and nothing more is dispatched."""
        task = self._turns.runs.get(run_id)
        if task is None and await self.wake(run_id, cancel=True):  # parked: nobody else drives it
            task = self._turns.runs.get(run_id)
        if task is None:
            status = await self.store.run_status(run_id)
            if status is None:
                return Cancellation.NOT_FOUND
            return Cancellation.ALREADY_FINISHED if RunStatus(status).terminal else Cancellation.NOT_OWNED
        self._turns.cancel(run_id)
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
        for job in self._background:
            job.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
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
        self._limits = limits
        self._defaults = defaults
        self._tenant_tools = tenant_tools
        self._tenant_policies = tenant_policies
        self._deps.endpoint.tokens = tokens
        self._deps.endpoint.url = mcp_url

    async def close(self) -> None:
        """Stop the background jobs, then cancel every run this process drives, recording each as cancelled."""
        for job in self._background:
            job.cancel()
        self._turns.cancel_all()
        await asyncio.gather(*self._background, *self._turns.runs.values(), return_exceptions=True)

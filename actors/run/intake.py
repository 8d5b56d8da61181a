"""Whether a run may start, and as what (``Intake``): a request weighed against what this supervisor offers now:
the operator's ``Rules``, the tools listed and declared, the planners, and the toolsets' resource checks. A new
run and a continuation are admitted the same way; what is admitted becomes a ``NewRun``, recorded by the service.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from actors.run.deps import RunDeps
from actors.run.planning import planning_context
from actors.run.recorder import now
from actors.run.resource_check import ResourceCheckUnavailable, checks_for, resource_checks
from actors.run.submission import RunRequest, Submission, SubmitResult, refused_submission
from actors.toolsets.config import Toolsets
from actors.toolsets.pinning import run_pin
from dag.admission import Offer, RunAdmitted, admit_run
from dag.agents import AgentRefused, StartAgent, check_first_call
from dag.budget import BudgetRequest, Budgets
from dag.contracts import ToolContract
from dag.events import NodeError, ParentLink, RunContinued, RunCreated
from dag.plan import Plan
from dag.policy import Principal, TenantPolicy
from dag.run_state import RunState, fold
from planner.base import default_model, proposal_bound, required_tools
from planner.registry import MODEL_PLANNER

if TYPE_CHECKING:
    from actors.calls.call import ToolOutcome


@dataclass(frozen=True)
class Rules:
    """What the operator set for runs: replaced whole by a redeployment, for the runs submitted from then on."""

    limits: Budgets
    """The most any run may be granted."""
    defaults: Budgets | None = None
    """What a run that asks for no budget is granted (``None``: the limits)."""
    tenant_tools: Mapping[str, tuple[str, ...]] | None = None
    """The tools each tenant may use (``None``: every tenant, every tool; a tenant not named: none)."""
    tenant_policies: Mapping[str, TenantPolicy] = field(default_factory=dict)
    """Each tenant's own policy (budgets, plan review); a tenant not named has the default one."""

    def granted(self, tenant_id: str) -> tuple[str, ...] | None:
        """The tools ``tenant_id`` may use (``None``: any)."""
        return self.tenant_tools.get(tenant_id, ()) if self.tenant_tools is not None else None

    def policy(self, tenant_id: str) -> TenantPolicy:
        return self.tenant_policies.get(tenant_id, TenantPolicy())


@dataclass(frozen=True)
class Admitted:
    """A run admitted over this supervisor's offer: what admission checked, and what it granted."""

    admission: RunAdmitted
    granted: tuple[str, ...] | None
    """The tenant's tools (``None``: any)."""
    unlisted: Mapping[str, frozenset[str]]
    """Declared tools whose server is not listed now: the run may name them; they are checked once listed."""

    @property
    def tools(self) -> set[str]:
        """Every tool the run may call: those admission checked, and the declared ones not listed yet."""
        return {*self.admission.tools, *self.unlisted}


@dataclass(frozen=True)
class NewRun:
    """A run admitted and not recorded yet: its first event (and a continuation's second), and what its row
    keeps beside them."""

    created: RunCreated
    request_hash: str
    """What makes a replay of the same request the same run (and a different one a conflict)."""
    tools: Collection[str] | None
    checked_plan: Plan | None
    """The plan admission checked (a given plan): the driver starts from it rather than checking it again."""
    idempotency_key: str | None = None
    continued: RunContinued | None = None


@dataclass(frozen=True)
class _Asked:
    """What a run is asked to be: a request's, or an agent node's for its child run."""

    planner: str | None
    plan: Mapping[str, Any] | None
    resource: Mapping[str, str]
    budgets: BudgetRequest | None
    stage: str
    model: str | None
    goal: str
    review: bool
    trace: Mapping[str, str] | None
    depth: int = 0
    tools: Collection[str] | None = None


class Intake:
    """Admits runs: a new run's request, and (through ``admit`` and ``check_resource``) a continuation's."""

    def __init__(
        self,
        deps: RunDeps,
        *,
        rules: Rules,
        toolsets: Toolsets | None = None,
        database: Any = None,
        unavailable_planners: Mapping[str, str] | None = None,
        toolset_planner: str | None = None,
    ) -> None:
        """``toolsets`` declare the servers' tools (those not listed yet may still be named) and their resource
        checks, who may run over which resource (none: the policy alone), some of which read ``database``;
        ``toolset_planner`` plans a run that names no planner and gives no plan."""
        self._deps = deps
        self.rules = rules
        """Replaced whole by a redeployment (``RunService.reconfigure``)."""
        self._toolsets = toolsets
        self._resource_checks = (
            resource_checks(toolsets, deps.catalogue, database=database, call_tool=partial(call_as, deps))
            if toolsets is not None
            else {}
        )
        self._unavailable_planners = dict(unavailable_planners or {})
        self._toolset_planner = toolset_planner
        self.planner_tools = {name: required_tools(planner) for name, planner in deps.planners.items()}
        """Each planner offered, with the tools it cannot plan or judge a run without."""
        self._planner_models = {
            name: model
            for name, planner in deps.planners.items()
            if (model := default_model(planner)) is not None
        }
        """Each planner that plans with a model, with its default: a run may name another its tenant allows."""

    async def new_run(self, request: RunRequest) -> NewRun | SubmitResult:
        """``request`` admitted as a run to record, or the refusal."""
        admitted = await self._admitted(
            request.principal,
            _Asked(
                planner=request.planner,
                plan=request.plan,
                resource=request.resource,
                budgets=request.budgets,
                stage=request.stage,
                model=request.model,
                goal=request.goal,
                review=request.review,
                trace=request.trace,
            ),
        )
        if isinstance(admitted, SubmitResult):
            return admitted
        created, admitted_run = admitted
        return NewRun(
            created,
            idempotency_key=request.idempotency_key,
            request_hash=replace(request, planner=admitted_run.admission.planner).fingerprint(),
            tools=admitted_run.tools,
            checked_plan=admitted_run.admission.plan,
        )

    async def new_child(
        self,
        parent: RunState,
        child_run_id: str,
        link: ParentLink,
        start: StartAgent,
        trace: Mapping[str, str],
    ) -> NewRun | SubmitResult:
        """An agent node's child run admitted as any run is (``admit``, ``check_resource``): with its parent's
        principal, tenant, resource and stage, never anything of the model's; its tools the node's narrowed
        ones, its budgets those carved for it, its id the one its parent recorded; a loop planned by the
        deployment's model planner, with the node's model if it names one (its tenant's policy decides). Or
        the refusal."""
        agent = start.agent
        admitted = await self._admitted(
            parent.principal,
            _Asked(
                planner=MODEL_PLANNER if agent.loop is not None else agent.planner,
                plan=agent.plan.to_json() if agent.plan is not None else None,
                resource=parent.resource,
                budgets=BudgetRequest.model_validate(start.budgets.model_dump()),
                stage=parent.stage,
                model=agent.model,
                goal=agent.goal,
                review=False,
                trace=trace,
                depth=start.depth,
                tools=start.tools,
            ),
        )
        if isinstance(admitted, SubmitResult):
            return admitted
        created, admitted_run = admitted
        return NewRun(
            created.model_copy(update={"run_id": child_run_id, "parent": link}),
            request_hash=f"agent:{link.run_id}/{link.node_id}",
            tools=admitted_run.tools,
            checked_plan=admitted_run.admission.plan,
        )

    def first_call_refusal(self, child: NewRun) -> NodeError | None:
        """Why an admitted child run could not pay for its first model call, or ``None``: the worst case of the
        plan request its planner would send first (``planner.base.proposal_bound``, from the very context its
        driver would show it) weighed against the budgets it was carved (``dag.agents.check_first_call``). A
        child given its plan, or planned with no model, makes no such call first."""
        created = child.created
        planner = self._deps.planners.get(created.planner)
        if created.proposal is not None or planner is None:
            return None
        bound = proposal_bound(planner, planning_context(fold([created]), self._deps))
        if bound is None:
            return None
        try:
            check_first_call(created.budgets, bound)
        except AgentRefused as exc:
            return exc.node_error()
        return None

    async def _admitted(
        self, principal: Principal, asked: _Asked
    ) -> tuple[RunCreated, Admitted] | SubmitResult:
        """A run ``principal`` asked for, admitted (``admit``, ``check_resource``) with its first event, or the
        refusal."""
        admitted = self.admit(
            principal.tenant_id,
            planner=asked.planner,
            plan=asked.plan,
            resource=asked.resource,
            budgets=asked.budgets,
            stage=asked.stage,
            model=asked.model,
            depth=asked.depth,
            tools=asked.tools,
        )
        if isinstance(admitted, SubmitResult):
            return admitted
        refused = await self.check_resource(principal, asked.resource, admitted)
        if refused is not None:
            return refused
        admission = admitted.admission
        created = self.first_event(
            principal,
            admitted,
            resource=asked.resource,
            goal=asked.goal,
            stage=asked.stage,
            budgets=admission.budgets,
            proposal=asked.plan,
            review=asked.review,
            model=asked.model,
            trace=asked.trace,
            tool_pins=self._pins(admission.tools),
        )
        return created, admitted

    def _pins(self, tools: Collection[str]) -> dict[str, str] | None:
        """The definition digest of each of ``tools`` this supervisor pinned (``None``: none)."""
        pins = self._deps.pins
        return {name: run_pin(pins[name]) for name in sorted(tools) if name in pins} or None

    def first_event(
        self,
        principal: Principal,
        admitted: Admitted,
        *,
        resource: Mapping[str, str],
        goal: str,
        stage: str,
        budgets: Budgets,
        proposal: Mapping[str, Any] | None,
        review: bool,
        model: str | None,
        trace: Mapping[str, str] | None,
        tool_pins: Mapping[str, str] | None,
    ) -> RunCreated:
        """The ``RunCreated`` of a run admitted as ``admitted`` for ``principal``: a new id, the planner and
        tools admission granted, and a plan review if asked for or its tenant's policy wants one."""
        return RunCreated(
            at=now(),
            run_id=str(uuid.uuid4()),
            tenant_id=principal.tenant_id,
            subject=principal.subject,
            scopes=tuple(sorted(principal.scopes)),
            resource=dict(resource),
            goal=goal,
            stage=stage,
            planner=admitted.admission.planner,
            budgets=budgets,
            proposal=dict(proposal) if proposal is not None else None,
            tenant_tools=admitted.granted,
            review=review or self.rules.policy(principal.tenant_id).plan_review,
            model=model,
            trace=dict(trace) if trace else None,
            tool_pins=dict(tool_pins) if tool_pins is not None else None,
        )

    def admit(
        self,
        tenant_id: str,
        *,
        planner: str | None,
        plan: Mapping[str, Any] | None,
        resource: Mapping[str, str],
        budgets: BudgetRequest | None,
        stage: str,
        model: str | None,
        depth: int = 0,
        tools: Collection[str] | None = None,
    ) -> Admitted | SubmitResult:
        """A run of ``tenant_id`` weighed against what is offered now (``dag.admission``): admitted, or the
        refusal. A child run (``depth`` > 0) is offered at most ``tools``, its parent's narrowed by its node."""
        granted = self.rules.granted(tenant_id)
        if tools is not None:
            granted = tuple(sorted(set(tools) if granted is None else set(tools) & set(granted)))
        unlisted = self._unlisted_tools(granted)
        admission = admit_run(
            planner=planner,
            plan=plan,
            resource=resource,
            budgets=budgets,
            offer=replace(
                self._offer(tenant_id, granted, unlisted), agent_levels=self._deps.agent_levels(depth)
            ),
            stage=stage,
            model=model,
        )
        if not isinstance(admission, RunAdmitted):
            return refused_submission(admission)
        return Admitted(admission, tuple(granted) if granted is not None else None, unlisted)

    async def check_resource(
        self, principal: Principal, resource: Mapping[str, str], admitted: Admitted
    ) -> SubmitResult | None:
        """The toolsets' resource checks of the run's tools: ``None`` if each allows ``principal`` the
        resource, else the refusal (one answer for an unknown resource and another tenant's)."""
        for check in checks_for(self._resource_checks, list(admitted.admission.checked_by)):
            try:
                answer = await check(principal, resource)
            except ResourceCheckUnavailable as exc:
                return SubmitResult(Submission.RESOURCE_CHECK_UNAVAILABLE, error={"message": str(exc)})
            if not answer.allowed:
                return SubmitResult(
                    Submission.RESOURCE_NOT_FOUND, error={"problem": answer.problem, "detail": answer.detail}
                )
        return None

    def served_tools(self) -> set[str]:
        """Every tool this supervisor is declared to serve, its server listed now or not."""
        declared = () if self._toolsets is None else self._toolsets.servers
        return {*self._deps.catalogue, *(name for server in declared for name in server.tools)}

    def _offer(
        self, tenant_id: str, granted: Sequence[str] | None, unlisted: Mapping[str, frozenset[str]]
    ) -> Offer:
        """What a run of ``tenant_id``, granted ``granted``, is offered now: admission weighs a request by it.
        Its budgets' defaults are its tenant's where its policy names them, else the server's."""
        rules = self.rules
        defaults = rules.defaults
        policy = rules.policy(tenant_id)
        tenant_budgets = policy.budgets
        if tenant_budgets is not None:
            defaults = rules.limits.granted(tenant_budgets, defaults=defaults)
        return Offer(
            catalogue=self._deps.catalogue,
            limits=rules.limits,
            defaults=defaults,
            planners=self.planner_tools,
            unavailable_planners=self._unavailable_planners,
            toolset_planner=self._toolset_planner,
            withdrawn=self._deps.withdrawn,
            unlisted=unlisted,
            granted=granted,
            planner_models=self._planner_models,
            models=policy.models,
            loop_planner=MODEL_PLANNER,
        )

    def _unlisted_tools(self, granted: Sequence[str] | None) -> dict[str, frozenset[str]]:
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
            and (granted is None or name in granted)
        }


async def call_as(
    deps: RunDeps,
    principal: Principal,
    resource: Mapping[str, str],
    contract: ToolContract,
    args: dict[str, Any],
) -> ToolOutcome:
    """One call of ``contract`` outside any run (a resource check, a reconciling read), with a token minted for
    ``principal`` as a node's would be."""
    from actors.calls.call import ToolCall

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

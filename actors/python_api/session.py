"""raydag from a Python script or a Ray job entrypoint: the same supervisor, store, policy and budgets as the API,
driven in-process.

``start()`` (``actors.python_api.opening``), when no raydag serves the script's home, brings up what a run needs
beside the script's own Ray (or a local one, or the cluster ``RAY_ADDRESS`` names): the database
(``RAYDAG_DATABASE_URL``, else the embedded one), its migrations, the caseops tool server unless
``RAYDAG_MCP_URL`` names one, and a supervisor over the toolsets given. Everything it started stops when the
block ends; a Ray the script started itself is left running.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from actors.api.operations import listed as listed_operations
from actors.api.operations import shown
from actors.api.views import (
    as_json,
    pending_view,
    question_view,
    read_report,
    review_view,
    run_summary,
    tool_question_view,
)
from actors.launch.desk import decisions_desk, listing_over
from actors.run.approvals import DECISION_SCOPES, Decisions, Found, Verdict
from actors.run.submission import DEFAULT_GOAL, ContinueRequest, RunRequest, Submission, SubmitResult
from actors.store.listing import RunFilter
from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE, ToolContract
from dag.errors import RaydagError
from dag.policy import Principal, policy_of
from dag.states import RunStatus

_T = TypeVar("_T")


RESTART_POLL_S = 0.25
"""How often ``wait`` asks again while every supervisor is restarting."""


class RunRefused(RaydagError):
    """The supervisor started no run: ``outcome`` says why (an invalid plan, an unknown case, ...)."""

    def __init__(self, outcome: Submission, error: Mapping[str, Any] | None) -> None:
        self.outcome = outcome
        self.error = dict(error) if error else None
        refusal = SubmitResult(outcome, error=self.error).refusal()
        super().__init__(f"no run was started ({outcome.value}): {refusal.detail if refusal else self.error}")


@dataclass(frozen=True)
class Run:
    """A run as the API shows it (``GET /runs/{id}`` and its ``/nodes``)."""

    run_id: str
    status: str
    stop_reason: str | None
    detail: str | None
    result: Mapping[str, Any] | None
    plan: Mapping[str, Any] | None
    nodes: tuple[Mapping[str, Any], ...] = field(repr=False)

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> Run:
        run = report["run"]
        return cls(
            run_id=run["run_id"],
            status=run["status"],
            stop_reason=run["stop_reason"],
            detail=run["detail"],
            result=run["result"],
            plan=run["plan"],
            nodes=tuple(report["nodes"]),
        )

    def node(self, node_id: str) -> Mapping[str, Any]:
        """One node by id (``KeyError`` if the run has none of that id)."""
        for node in self.nodes:
            if node["node_id"] == node_id:
                return node
        raise KeyError(node_id)


class Raydag:
    """Runs plans and goals through one supervisor, as an operator of ``tenant`` holding every scope its
        toolsets declare. Obtain one from ``start()`` (``AttachedRaydag``: the same, made through a raydag
    serving the script's home)."""

    def __init__(self, runtime: Any, tenant: str, subject: str) -> None:
        self._runtime = runtime
        self._tenant = tenant
        self._subject = subject

    @property
    def subject(self) -> str:
        """Who the session's runs are for (``script:$USER``): the run's own principal, who may not approve
        its irreversible writes."""
        return self._subject

    def tools(self) -> dict[str, ToolContract]:
        """The tools offered now, by name (those of servers listed so far)."""

        contracts: dict[str, ToolContract] = self._answer(lambda supervisor: supervisor.contracts.remote())
        return contracts

    def toolsets(self) -> dict[str, Any]:
        """Each toolset server's state, as ``/readyz`` shows it."""

        status: dict[str, Any] = self._answer(lambda supervisor: supervisor.toolsets.remote())
        return status

    def _principal(self) -> Principal:
        """The caller: the session's tenant and subject, with every scope the toolsets served declare."""
        return Principal(self._tenant, self._subject, self._runtime.toolsets.scopes)

    def submit(
        self,
        plan: Mapping[str, Any] | None = None,
        *,
        resource: Mapping[str, str] | None = None,
        goal: str | None = None,
        planner: str | None = None,
        budgets: BudgetRequest | None = None,
        idempotency_key: str | None = None,
        stage: str = INVESTIGATE,
        review: bool = False,
        model: str | None = None,
    ) -> str:
        """Start a run over ``resource`` (``{"root": "/srv/reports"}``, ``{"case_id": "C-102"}``; what the
        tools' run-bound inputs are checked against) and return its id. With ``plan``, the run executes it
        (planner ``outputs`` unless another is named); without, ``planner`` (default: the toolsets' own,
        caseops' ``conformance``) proposes one for ``goal``. ``stage`` picks the tools the run is offered: a
        stage that acts (caseops' ``act``) offers writes, each waiting for its approval (``approve``). With
        ``review``, each round's plan waits for a person's yes (``reviews``, ``approve_plan``) before any of
        it runs; a tenant's policy may require it. ``model``: the model the ``openai`` planner plans with
        (default ``RAYDAG_MODEL``; another only if the tenant's policy lists it)."""

        request = RunRequest(
            principal=self._principal(),
            resource=dict(resource or {}),
            goal=goal or DEFAULT_GOAL,
            planner=planner,
            plan=plan,
            budgets=budgets,
            # A key of its own when none is given: asked again of another supervisor, it is one run still.
            idempotency_key=idempotency_key or f"script:{uuid.uuid4()}",
            stage=stage,
            review=review,
            model=model,
        )
        submitted: SubmitResult = self._answer(lambda supervisor: supervisor.submit.remote(request))
        if submitted.outcome not in (Submission.CREATED, Submission.REPLAYED):
            raise RunRefused(submitted.outcome, submitted.error)
        assert submitted.run_id is not None
        return str(submitted.run_id)

    def continue_run(
        self,
        run_id: str,
        *,
        goal: str | None = None,
        answer: str | None = None,
        budgets: BudgetRequest | None = None,
    ) -> str:
        """Continue a run that stopped or needs a person, and return the continuation's id: a new run over
        the same resource that reuses every read that succeeded and takes the writes over by id (a succeeded
        one never executes again). ``goal`` replaces the run's; ``answer`` is shown to the planner with who
        gave it; ``budgets`` may exceed the earlier run's within the limits. Continuing a run again returns
        the same continuation; ``RunRefused`` says why a run cannot be continued (docs/PEOPLE.md)."""

        request = ContinueRequest(
            principal=self._principal(), run_id=run_id, goal=goal, answer=answer, budgets=budgets
        )
        submitted: SubmitResult = self._answer(lambda supervisor: supervisor.continue_run.remote(request))
        if submitted.outcome not in (Submission.CREATED, Submission.REPLAYED):
            raise RunRefused(submitted.outcome, submitted.error)
        assert submitted.run_id is not None
        return str(submitted.run_id)

    def _answer(self, ask: Callable[[Any], Any]) -> Any:
        """A supervisor's answer to ``ask(supervisor)``, asking the next one when a supervisor is unavailable
        (restarting after its process or node was lost). Only for what may be asked twice: a submission with
        its idempotency key, a continuation, a wait."""
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError

        unavailable: Exception | None = None
        for supervisor in self._runtime.in_turn():
            try:
                return ray.get(ask(supervisor))
            except (ActorDiedError, ActorUnavailableError) as exc:
                unavailable = exc
        assert unavailable is not None, "a runtime has at least one supervisor"
        raise unavailable

    def wait(self, run_id: str, timeout_s: float = 300.0) -> Run:
        """The run once it has ended; ``TimeoutError`` if it has not within ``timeout_s``."""
        from ray.exceptions import ActorDiedError, ActorUnavailableError

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._answer(lambda supervisor: supervisor.wait.remote(run_id, min(1.0, timeout_s))):
                    return self.get(run_id)
            except (ActorDiedError, ActorUnavailableError):  # every supervisor is starting again
                time.sleep(RESTART_POLL_S)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} has not ended within {timeout_s:g}s")

    def get(self, run_id: str) -> Run:
        """The run as it is now, with its nodes."""
        report = asyncio.run(read_report(self._runtime.dsn, self._principal(), run_id, self.tools()))
        return Run.of(report)

    def run(
        self,
        plan: Mapping[str, Any] | None = None,
        *,
        resource: Mapping[str, str] | None = None,
        goal: str | None = None,
        planner: str | None = None,
        budgets: BudgetRequest | None = None,
        idempotency_key: str | None = None,
        timeout_s: float = 300.0,
        stage: str = INVESTIGATE,
        review: bool = False,
        model: str | None = None,
    ) -> Run:
        """``submit``, then ``wait``: the run, ended, with its nodes and result."""
        run_id = self.submit(
            plan,
            resource=resource,
            goal=goal,
            planner=planner,
            budgets=budgets,
            idempotency_key=idempotency_key,
            stage=stage,
            review=review,
            model=model,
        )
        return self.wait(run_id, timeout_s)

    def runs(
        self, *, status: Collection[str] = (), resource: Mapping[str, str] | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The tenant's runs this session may read, newest first, as ``GET /runs`` lists them: any of
        ``status`` (``"waiting"``…; all if empty), whose resource holds every pair of ``resource``; at most
        ``limit``."""
        unknown = sorted(set(status) - {every.value for every in RunStatus})
        if unknown:
            raise ValueError(
                f"unknown run status {unknown}; known: {sorted(every.value for every in RunStatus)}"
            )

        async def listed() -> list[dict[str, Any]]:
            chosen = RunFilter(statuses=list(status), resource=dict(resource or {}))
            async with listing_over(self._runtime.dsn) as listing:
                rows = await listing.runs(self._principal(), chosen, after=None, limit=limit)
            return [as_json(run_summary(row)) for row in rows]

        return asyncio.run(listed())

    def inbox(self, *, by: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """What waits for a person across the tenant's runs, soonest deadline first, as ``GET /decisions`` lists
        it: each decision with what a person needs to decide it, and whether ``by`` (a person of the session's
        tenant; the session itself if ``None``) may (``decidable``)."""
        principal = self._decider(by) if by is not None else self._principal()
        policy = policy_of(self._runtime.settings.tenant_policies(), self._tenant)

        async def listed() -> list[dict[str, Any]]:
            async with listing_over(self._runtime.dsn) as listing:
                found = await listing.pending(principal, RunFilter(), after=None, limit=limit)
            return [as_json(pending_view(pending, principal, policy)) for pending in found]

        return asyncio.run(listed())

    def operations(self, run_id: str) -> list[dict[str, Any]]:
        """The run's writes, as ``GET /runs/{id}/operations`` lists them (docs/EFFECTS.md)."""

        async def listed(desk: Decisions) -> list[dict[str, Any]]:
            if await desk.runs.run_row(self._principal(), run_id) is None:
                return []
            return [as_json(view) for view in await listed_operations(desk.operations, run_id)]

        return asyncio.run(self._at_desk(listed))

    def approve(
        self, run_id: str, operation_id: str, args_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Approve the operation's exact arguments (``args_hash``, as listed) for the person ``by`` of the
        session's tenant; ``DecisionRefused`` says why not (another hash, already decided, expired, or ``by``
        is the run's own principal where the tenant's policy does not allow it)."""
        return self._decide_operation(run_id, operation_id, args_hash, "approve", by=by, note=note)

    def reject(
        self, run_id: str, operation_id: str, args_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Reject the operation: it never executes."""
        return self._decide_operation(run_id, operation_id, args_hash, "reject", by=by, note=note)

    def resolve(
        self, run_id: str, operation_id: str, args_hash: str, found: Found, *, by: str, note: str
    ) -> dict[str, Any]:
        """Settle an operation whose outcome is unknown with what ``by`` found (``succeeded`` or ``failed``)."""

        async def settled(desk: Decisions) -> dict[str, Any]:
            moved = await desk.resolve_operation(
                self._decider(by), run_id, operation_id, found, quoted_hash=args_hash, note=note
            )
            return as_json(await shown(desk.operations, moved))

        return asyncio.run(self._at_desk(settled))

    def _decide_operation(
        self, run_id: str, operation_id: str, args_hash: str, verdict: Verdict, *, by: str, note: str | None
    ) -> dict[str, Any]:
        async def made(desk: Decisions) -> dict[str, Any]:
            moved = await desk.decide_operation(
                self._decider(by), run_id, operation_id, verdict, quoted_hash=args_hash, note=note
            )
            return as_json(await shown(desk.operations, moved))

        return asyncio.run(self._at_desk(made))

    def reviews(self, run_id: str) -> list[dict[str, Any]]:
        """The run's plans put to review, a round each, as ``GET /runs/{id}/reviews`` lists them."""

        async def listed(desk: Decisions) -> list[dict[str, Any]]:
            if await desk.runs.run_row(self._principal(), run_id) is None:
                return []
            return [as_json(review_view(review)) for review in await desk.reviews.of_run(run_id)]

        return asyncio.run(self._at_desk(listed))

    def approve_plan(
        self, run_id: str, round_number: int, plan_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Approve round ``round_number``'s exact plan (``plan_hash``, as listed) for the person ``by`` of the
        session's tenant: the run dispatches it. ``DecisionRefused`` says why not (another hash, already
        decided, expired, or ``by`` is the run's own principal where the tenant's policy does not allow it)."""
        return self._decide_plan(run_id, round_number, plan_hash, "approve", by=by, note=note)

    def reject_plan(
        self, run_id: str, round_number: int, plan_hash: str, *, by: str, note: str | None = None
    ) -> dict[str, Any]:
        """Reject the round's plan: nothing of it runs, and the run stops ``PLAN_REJECTED``."""
        return self._decide_plan(run_id, round_number, plan_hash, "reject", by=by, note=note)

    def _decide_plan(
        self, run_id: str, round_number: int, plan_hash: str, verdict: Verdict, *, by: str, note: str | None
    ) -> dict[str, Any]:
        async def made(desk: Decisions) -> dict[str, Any]:
            decided = await desk.decide_plan(
                self._decider(by), run_id, round_number, verdict, quoted_hash=plan_hash, note=note
            )
            return as_json(review_view(decided))

        return asyncio.run(self._at_desk(made))

    def questions(self, run_id: str) -> list[dict[str, Any]]:
        """What the run's planner asked a person, as ``GET /runs/{id}/questions`` lists it (docs/PEOPLE.md)."""

        async def listed(desk: Decisions) -> list[dict[str, Any]]:
            if await desk.runs.run_row(self._principal(), run_id) is None:
                return []
            return [as_json(question_view(question)) for question in await desk.questions.of_run(run_id)]

        return asyncio.run(self._at_desk(listed))

    def answer(self, run_id: str, number: int, answer: str, *, by: str) -> dict[str, Any]:
        """Answer the planner's question ``number`` as the person ``by`` of the session's tenant: the planner is
        shown it with its author, never as authority. ``DecisionRefused`` says why not (no such question,
        already answered, expired)."""

        async def answered(desk: Decisions) -> dict[str, Any]:
            return as_json(question_view(await desk.answer(self._decider(by), run_id, number, answer)))

        return asyncio.run(self._at_desk(answered))

    def tool_questions(self, run_id: str) -> list[dict[str, Any]]:
        """What the run's tools asked a person mid-call, as ``GET /runs/{id}/tool-questions`` lists it."""

        async def listed(desk: Decisions) -> list[dict[str, Any]]:
            if await desk.runs.run_row(self._principal(), run_id) is None:
                return []
            return [as_json(tool_question_view(asked)) for asked in await desk.tool_questions.of_run(run_id)]

        return asyncio.run(self._at_desk(listed))

    def answer_tool(
        self, run_id: str, question_id: str, content: Mapping[str, Any] | None = None, *, by: str
    ) -> dict[str, Any]:
        """Answer a tool's question with ``content`` (which must fit the schema it asked for), or decline it
        (``content=None``), as the person ``by`` of the session's tenant: the tool is sent it as its input,
        never as authority. ``DecisionRefused`` says why not (``tool-answer-invalid``, withdrawn, expired…)."""

        async def decided(desk: Decisions) -> dict[str, Any]:
            principal = self._decider(by)
            accept = content is not None
            return as_json(
                tool_question_view(
                    await desk.answer_tool(principal, run_id, question_id, accept=accept, content=content)
                )
            )

        return asyncio.run(self._at_desk(decided))

    def _decider(self, by: str) -> Principal:
        """The person ``by`` of the session's tenant, holding every scope the toolsets declare and every scope
        a decision needs: a script decides what it may read, as any kind."""
        return Principal(self._tenant, by, self._runtime.toolsets.scopes | DECISION_SCOPES)

    async def _at_desk(self, work: Callable[[Decisions], Awaitable[_T]]) -> _T:
        """``work`` done where decisions are made (``actors.run.approvals.Decisions``, as the API makes them),
        over a connection of its own, closed after."""
        async with decisions_desk(self._runtime.dsn, self._runtime.settings) as desk:
            return await work(desk)

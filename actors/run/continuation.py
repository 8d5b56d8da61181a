"""A stopped run continued (``Continuations``): a new run over the earlier run's principal, resource, stage,
planner and pinned tools, carrying over what succeeded in it (``dag.continuation`` decides what carries). An
agent node's child run that did not complete is continued the same way (``Continuations.carried``) when its
continued parent's identical node starts its child."""

from __future__ import annotations

from datetime import datetime

from actors.run.approvals import Person
from actors.run.deps import RunDeps
from actors.run.intake import Intake, NewRun
from actors.run.submission import ContinueRequest, Submission, SubmitResult, refused_submission
from actors.store.operations import OperationStore
from actors.store.runs import RunStore
from dag.admission import OverLimits
from dag.budget import BudgetAboveLimit
from dag.continuation import (
    ContinueRefusal,
    Ledgered,
    carried_operations,
    carried_outputs,
    continue_refusal,
    continued_answers,
    continued_budgets,
    unfinished_children,
)
from dag.contracts import Risk
from dag.events import RunContinued
from dag.run_state import RunState, fold
from dag.states import RunStatus


class Continuations:
    """Turns a request to continue a run into the new run to record, or the refusal."""

    def __init__(self, deps: RunDeps, *, intake: Intake, store: RunStore, operations: OperationStore) -> None:
        self._deps = deps
        self._intake = intake
        self._store = store
        self._operations = operations

    async def new_run(self, request: ContinueRequest) -> NewRun | SubmitResult:
        """The continuation of ``request.run_id`` admitted as a run to record, or why it is not: the earlier
        run is not the requester's tenant's, has not finished, cannot be continued, or its history was pruned;
        or the new run is refused as a new run would be."""
        row = await self._store.run_row(request.principal, request.run_id)
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
        earlier = fold(item.event for item in await self._store.events(str(row["run_id"])))
        principal = earlier.principal
        admitted = self._intake.admit(
            principal.tenant_id,
            planner=earlier.planner,
            plan=earlier.proposal,
            resource=earlier.resource,
            budgets=None,
            stage=earlier.stage,
            model=earlier.model,
        )
        if isinstance(admitted, SubmitResult):
            return admitted
        try:
            budgets = continued_budgets(earlier.budgets, self._intake.rules.limits, request.budgets)
        except BudgetAboveLimit as exc:
            return refused_submission(OverLimits(exc))
        refused = await self._intake.check_resource(principal, earlier.resource, admitted)
        if refused is not None:
            return refused
        by = Person(request.principal.tenant_id, request.principal.subject).actor
        created = self._intake.first_event(
            principal,
            admitted,
            resource=earlier.resource,
            goal=request.goal or earlier.goal,
            stage=earlier.stage,
            budgets=budgets,
            proposal=earlier.proposal,
            review=earlier.review,
            model=earlier.model,
            trace=request.trace,
            tool_pins=earlier.tool_pins,
        )
        continued = await self.carried(earlier, at=created.at, by=by, answer=request.answer)
        return NewRun(
            created,
            continued=continued,
            request_hash=request.fingerprint(),
            tools=row["tools"],
            checked_plan=admitted.admission.plan,
        )

    async def carried(
        self, earlier: RunState, *, at: datetime, by: str, answer: str | None = None
    ) -> RunContinued:
        """The second event of a run that continues ``earlier``, continued by ``by`` (with ``answer``): what it
        carries over of ``earlier`` and of the runs ``earlier`` continues, as ``dag.continuation`` decides."""
        return RunContinued(
            at=at,
            continues=earlier.run_id,
            by=by,
            outputs=carried_outputs(earlier, self._is_read),
            operations=carried_operations(await self._ledgered(earlier)),
            answers=continued_answers(earlier, answer, by),
            children=unfinished_children(earlier),
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

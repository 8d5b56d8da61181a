"""The operation ledger over HTTP: a run's writes listed, and a person's approval, rejection or resolution.

A decision quotes the SHA-256 of the operation's exact arguments (``args_hash``): a yes to other arguments than
the operation's is refused, never applied. Deciding needs the scope ``runs:approve``; the run's own principal
decides only where its tenant's policy allows it (``RAYDAG_TENANT_POLICY``; by default never). The decision
is ``actors.run.approvals``' (``Decisions``), as for plans and questions; a refusal is its problem.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, Caller, ReadableRun
from actors.api.schemas import OperationView, QuotedHash
from actors.api.views import decision_view, operation_view
from actors.store.operations import Operation, OperationStore

_OPERATION_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
OperationId = Annotated[str, Path(pattern=_OPERATION_ID, description="An operation of the run")]

router = APIRouter(tags=["operations"])


class OperationDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args_hash: QuotedHash = Field(description="The SHA-256 of the operation's arguments, as listed")
    note: str | None = Field(default=None, max_length=2000)


class Resolution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args_hash: QuotedHash = Field(description="The SHA-256 of the operation's arguments, as listed")
    outcome: Literal["succeeded", "failed"] = Field(description="What a person found the write did")
    note: str = Field(min_length=1, max_length=2000, description="What was checked, and how")


async def shown(store: OperationStore, moved: Operation) -> OperationView:
    """The operation a decision moved, with its history as the decision left it, and the runs sharing it."""
    history, sharers = await store.history([moved.operation_id]), await store.sharers([moved.operation_id])
    return decision_view(moved, history[moved.operation_id], sharers[moved.operation_id])


async def listed(store: OperationStore, run_id: str) -> list[OperationView]:
    """The run's operations as ``GET /runs/{run_id}/operations`` answers (``OperationStore.listed_for``), each
    with its history and the runs that share it."""
    found = await store.listed_for(run_id)
    ids = [operation.operation_id for operation in found]
    history, sharers = await store.history(ids), await store.sharers(ids)
    return [operation_view(op, history[op.operation_id], sharers[op.operation_id]) for op in found]


@router.get(
    "/runs/{run_id}/operations",
    response_model=list[OperationView],
    responses=problem_responses(401, 404, 503),
)
async def list_operations(run: ReadableRun, api: Api) -> list[OperationView]:
    """The run's writes, and those a continuation took over from the runs it continues: each with the run
    that proposed it, its arguments (a digest where the tool records digests), their hash, the tool's
    description, its state, and who moved it when."""
    return await listed(api.operations, str(run["run_id"]))


DECIDED = problem_responses(400, 401, 403, 404, 409, 422, 503)


@router.post(
    "/runs/{run_id}/operations/{operation_id}/approve", response_model=OperationView, responses=DECIDED
)
async def approve(
    run_id: str, operation_id: OperationId, body: OperationDecision, principal: Caller, api: Api
) -> OperationView:
    """Approve the operation's exact arguments: its supervisor executes it once."""
    moved = await api.decisions.decide_operation(
        principal, run_id, operation_id, "approve", quoted_hash=body.args_hash, note=body.note
    )
    return await shown(api.operations, moved)


@router.post(
    "/runs/{run_id}/operations/{operation_id}/reject", response_model=OperationView, responses=DECIDED
)
async def reject(
    run_id: str, operation_id: OperationId, body: OperationDecision, principal: Caller, api: Api
) -> OperationView:
    """Reject the operation: it never executes, and its node fails ``OPERATION_REJECTED``."""
    moved = await api.decisions.decide_operation(
        principal, run_id, operation_id, "reject", quoted_hash=body.args_hash, note=body.note
    )
    return await shown(api.operations, moved)


@router.post(
    "/runs/{run_id}/operations/{operation_id}/resolve", response_model=OperationView, responses=DECIDED
)
async def resolve(
    run_id: str, operation_id: OperationId, body: Resolution, principal: Caller, api: Api
) -> OperationView:
    """Settle an unknown outcome with what a person found (and a note saying how)."""
    moved = await api.decisions.resolve_operation(
        principal, run_id, operation_id, body.outcome, quoted_hash=body.args_hash, note=body.note
    )
    return await shown(api.operations, moved)

"""The operation ledger over HTTP: a run's writes listed, and a person's approval, rejection or resolution.

A decision quotes the SHA-256 of the operation's exact arguments (``args_hash``): a yes to other arguments than
the operation's is refused, never applied. Deciding needs the scope ``runs:approve``; the run's own principal
decides only where its tenant's policy allows it (``RAYDAG_TENANT_POLICY``; by default never). Each decision is one
conditional update of the operation's row (``actors.store.operations``): two people deciding at once, one wins,
the other is told it was already decided. The supervisor that drives the run reads the decision from the row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any, Literal, NoReturn

from fastapi import APIRouter, Depends, Path
from pydantic import BaseModel, ConfigDict, Field

from actors.api._problem import Problem, problem_responses
from actors.api.views import iso
from actors.run.approvals import DecisionRefused, Person, Verdict, decide, resolve
from actors.store.operations import Operation, OperationStore, Sharer, Transition
from dag.contracts import Recording
from dag.fingerprint import sha256_hex
from dag.operations import DecisionRefusal
from dag.policy import Principal, TenantPolicy

APPROVE_SCOPE = "runs:approve"
"""The scope a person needs to approve, reject or resolve an operation."""

_HASH = r"^[0-9a-f]{64}$"
_OPERATION_ID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
OperationId = Annotated[str, Path(pattern=_OPERATION_ID, description="An operation of the run")]

_REFUSALS: Mapping[DecisionRefusal, tuple[int, str]] = {
    DecisionRefusal.NOT_FOUND: (404, "no operation with this id belongs to this run"),
    DecisionRefusal.HASH_MISMATCH: (
        409,
        "args_hash is not the hash of this operation's arguments: a decision applies to exact arguments only",
    ),
    DecisionRefusal.ALREADY_DECIDED: (409, "the operation was already decided"),
    DecisionRefusal.EXPIRED: (409, "the operation expired before it was decided"),
    DecisionRefusal.SELF_APPROVAL: (
        403,
        "the run's own principal may not decide its operations of this risk (its tenant's policy)",
    ),
    DecisionRefusal.NOT_UNKNOWN: (409, "only an operation whose outcome is unknown can be resolved"),
}


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args_hash: str = Field(pattern=_HASH, description="The SHA-256 of the operation's arguments, as listed")
    note: str | None = Field(default=None, max_length=2000)


class Resolution(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args_hash: str = Field(pattern=_HASH)
    outcome: Literal["succeeded", "failed"] = Field(description="What a person found the write did")
    note: str = Field(min_length=1, max_length=2000, description="What was checked, and how")


def decision_view(moved: Operation, history: list[Transition], sharers: Sequence[Sharer]) -> dict[str, Any]:
    """The operation a person's decision moved, with its history as the decision left it: the run it wakes
    may move it on (approved → executing) before the history is read, and the answer shows the decision."""
    made = next(
        (
            index
            for index, step in enumerate(history)
            if step.to_state is moved.state and step.at == moved.updated_at  # one statement's now()
        ),
        len(history) - 1,
    )
    return operation_view(moved, history[: made + 1], sharers)


def operation_view(
    operation: Operation, history: list[Transition], sharers: Sequence[Sharer]
) -> dict[str, Any]:
    """One operation as its runs list it: ``run_id`` and ``node_id`` name the run and node that proposed it
    first; ``runs``, every run that shares it (proposed or joined it), in that order; ``shared``, whether
    any other run does."""
    digest = operation.recording is Recording.DIGEST
    return {
        "operation_id": operation.operation_id,
        "run_id": operation.run_id,
        "node_id": operation.node_id,
        "shared": len(sharers) > 1,
        "runs": [
            {"run_id": sharer.run_id, "node_id": sharer.node_id, "joined_at": iso(sharer.joined_at)}
            for sharer in sharers
        ],
        "tool": operation.tool,
        "description": operation.description,
        "risk": operation.risk.value,
        "approval": operation.approval.value,
        "state": operation.state.value,
        "args_hash": operation.args_hash,
        "args": None if digest else operation.args,
        "attempts": operation.attempts,
        "expires_at": iso(operation.expires_at),
        "created_at": iso(operation.created_at),
        "updated_at": iso(operation.updated_at),
        "output": (sha256_hex(operation.output) if digest else operation.output)
        if operation.output is not None
        else None,
        "error": operation.error.model_dump(mode="json") if operation.error is not None else None,
        "history": [
            {
                "from": step.from_state.value if step.from_state else None,
                "to": step.to_state.value,
                "actor": step.actor,
                "note": step.note,
                "at": iso(step.at),
            }
            for step in history
        ],
    }


async def listed_views(store: OperationStore, run_id: str) -> list[dict[str, Any]]:
    """What ``GET /runs/{run_id}/operations`` answers (``OperationStore.listed_for``), each with its history
    and the runs that share it."""
    found = await store.listed_for(run_id)
    ids = [operation.operation_id for operation in found]
    history, sharers = await store.history(ids), await store.sharers(ids)
    return [
        operation_view(operation, history[operation.operation_id], sharers[operation.operation_id])
        for operation in found
    ]


async def moved_view(store: OperationStore, moved: Operation) -> dict[str, Any]:
    """What a decision answers: the operation it moved (``decision_view``)."""
    history = await store.history([moved.operation_id])
    sharers = await store.sharers([moved.operation_id])
    return decision_view(moved, history[moved.operation_id], sharers[moved.operation_id])


def operations_router(
    *,
    operations: Callable[[], OperationStore],
    authenticated: Callable[..., Awaitable[Principal]],
    readable_run: Callable[[Principal, str], Awaitable[dict[str, Any]]],
    policy_of: Callable[[str], TenantPolicy],
) -> APIRouter:
    """The routes. ``readable_run`` is the API's tenant check (404 identical to an unknown run); ``policy_of``
    a tenant's policy (whether the run's own principal may decide its operations)."""
    router = APIRouter()
    caller = Depends(authenticated)

    def decider(principal: Principal) -> Person:
        if APPROVE_SCOPE not in principal.scopes:
            raise Problem(403, "scope-missing", f"deciding an operation needs the scope {APPROVE_SCOPE!r}")
        return Person(principal.tenant_id, principal.subject)

    async def shown(decision: Awaitable[Operation]) -> dict[str, Any]:
        """The operation a decision moved, with its history; the refusal's problem if it was refused."""
        try:
            moved = await decision
        except DecisionRefused as refused:
            _refuse(refused.refusal)
        return await moved_view(operations(), moved)

    @router.get("/runs/{run_id}/operations", responses=problem_responses(401, 404, 503))
    async def list_operations(run_id: str, principal: Principal = caller) -> list[dict[str, Any]]:
        """The run's writes (those it proposed, and those of other runs it joined: the same intent), and those
        a continuation took over from the runs it continues: each with the run that proposed it, the runs that
        share it, its arguments (a digest where the tool records digests), their hash, the tool's
        description, its state, and who moved it when."""
        row = await readable_run(principal, run_id)
        return await listed_views(operations(), str(row["run_id"]))

    async def verdict(
        principal: Principal, run_id: str, op_id: str, body: Decision, verdict: Verdict
    ) -> dict[str, Any]:
        person = decider(principal)
        run = str((await readable_run(principal, run_id))["run_id"])
        return await shown(
            decide(
                operations(),
                run,
                op_id,
                verdict,
                quoted_hash=body.args_hash,
                person=person,
                policy=policy_of(principal.tenant_id),
                note=body.note,
            )
        )

    decisions = problem_responses(400, 401, 403, 404, 409, 422, 503)

    @router.post("/runs/{run_id}/operations/{operation_id}/approve", responses=decisions)
    async def approve(
        run_id: str, operation_id: OperationId, body: Decision, principal: Principal = caller
    ) -> dict[str, Any]:
        """Approve the operation's exact arguments: its supervisor executes it once."""
        return await verdict(principal, run_id, operation_id, body, "approve")

    @router.post("/runs/{run_id}/operations/{operation_id}/reject", responses=decisions)
    async def reject(
        run_id: str, operation_id: OperationId, body: Decision, principal: Principal = caller
    ) -> dict[str, Any]:
        """Reject the operation: it never executes, and its node fails ``OPERATION_REJECTED``."""
        return await verdict(principal, run_id, operation_id, body, "reject")

    @router.post("/runs/{run_id}/operations/{operation_id}/resolve", responses=decisions)
    async def resolve_unknown(
        run_id: str, operation_id: OperationId, body: Resolution, principal: Principal = caller
    ) -> dict[str, Any]:
        """Settle an unknown outcome with what a person found (and a note saying how)."""
        person = decider(principal)
        run = str((await readable_run(principal, run_id))["run_id"])
        return await shown(
            resolve(
                operations(),
                run,
                operation_id,
                body.outcome,
                quoted_hash=body.args_hash,
                person=person,
                policy=policy_of(principal.tenant_id),
                note=body.note,
            )
        )

    return router


def _refuse(refusal: DecisionRefusal) -> NoReturn:
    status, detail = _REFUSALS[refusal]
    raise Problem(status, refusal.value, detail)

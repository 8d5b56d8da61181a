"""The evidence export: a case's bundle (snapshot, policy, every source document) gathered in stages.

Each stage is a read and a pause standing for the document store a real export pulls files from
(``ToolServerConfig.export_stage_ms``; a few seconds in all by default, less in tests). Run as an MCP task, each
stage is reported as the task's ``statusMessage`` and a cancelled task stops at the next stage; the bundle is
written in the same transaction that completes the task, so a cancelled export leaves no bundle behind.

With ``confirm``, a person must confirm the seal: before sealing, the task asks its client (a form elicitation,
``input_required`` in the 2026-07-28 Tasks extension) and seals only on an answer that says ``seal: true``;
any other answer (a decline, a cancel, ``false``) ends the export without a bundle, ``EXPORT_NOT_CONFIRMED``.
A call that cannot be asked (a plain call, or the 2025-11-25 form of Tasks, which this sessionless server
cannot send a request on) is refused at once, ``CONFIRMATION_UNAVAILABLE``: nothing is sealed unasked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets

import asyncpg

from dag.fingerprint import canonical_json
from mcp_server.caseops import CaseopsError, CaseopsRepository
from mcp_server.contracts import EvidenceBundle, ExportedDocument
from mcp_server.task_store import TaskRun, current_task

SEAL_QUESTION = "seal"
"""The key of the export's question (the extension's ``inputRequests`` key): asked once per task."""
SEAL_SCHEMA = {
    "type": "object",
    "properties": {
        "seal": {
            "type": "boolean",
            "title": "Seal the bundle",
            "description": "true seals the evidence bundle; false ends the export without one.",
        }
    },
    "required": ["seal"],
}


def bundle_digest(bundle: EvidenceBundle) -> str:
    """sha256 of the bundle's content: the same case at the same version exports to the same digest."""
    content = bundle.model_dump(mode="json", exclude={"digest", "export_id"})
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


async def export_evidence(
    pool: asyncpg.Pool, tenant_id: str, case_id: str, stage_ms: int, *, confirm: bool = False
) -> EvidenceBundle:
    """Export the case's evidence bundle; see the module docstring."""
    task = current_task.get()
    if confirm and (task is None or not task.can_ask):
        raise CaseopsError(
            "CONFIRMATION_UNAVAILABLE",
            "this export asks a person to confirm the seal, which only a task of the MCP Tasks extension "
            "(2026-07-28) can ask: call it as one, or without confirm",
        )
    repository = CaseopsRepository(pool)

    async def stage(message: str) -> None:
        if task is not None:
            await task.stage(message)
        await asyncio.sleep(stage_ms / 1000)

    await stage("reading the case snapshot")
    snapshot = await repository.case_snapshot(tenant_id, case_id)
    await stage("reading the policy requirements")
    policy = await repository.policy_requirements(tenant_id, case_id)
    documents = await repository.source_documents(tenant_id, case_id)
    exported = []
    for position, document in enumerate(documents, start=1):
        await stage(f"copying document {position} of {len(documents)}")
        exported.append(
            ExportedDocument(
                document_id=document.document_id,
                source_label=document.source_label,
                canonical_code=document.canonical_code,
                source_ref=document.source_ref,
            )
        )
    if confirm:
        assert task is not None
        await _confirmed(task, case_id, snapshot.version, len(exported))
    await stage("sealing the bundle")
    bundle = EvidenceBundle(
        export_id=task.task_id if task is not None else f"export-{secrets.token_hex(8)}",
        case_id=case_id,
        case_version=snapshot.version,
        policy_id=policy.policy_id,
        policy_version=policy.policy_version,
        documents=exported,
        evidence_refs=sorted(
            {snapshot.evidence_ref, policy.evidence_ref, *(document.source_ref for document in exported)}
        ),
        digest="",
    )
    bundle = bundle.model_copy(update={"digest": bundle_digest(bundle)})
    output = bundle.model_dump(mode="json")
    async with pool.acquire() as connection, connection.transaction():
        if task is not None:
            await task.complete_in(connection, output)
        await connection.execute(
            """INSERT INTO evidence_exports (tenant_id, export_id, case_id, case_version, bundle)
               VALUES ($1, $2, $3, $4, $5)""",
            tenant_id,
            bundle.export_id,
            case_id,
            bundle.case_version,
            json.dumps(output),
        )
    return bundle


async def _confirmed(task: TaskRun, case_id: str, version: int, documents: int) -> None:
    """Ask the task's client to confirm the seal; ``EXPORT_NOT_CONFIRMED`` unless it answers ``seal: true``."""
    message = f"Seal the evidence bundle of case {case_id} at version {version} ({documents} documents)?"
    request = {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": SEAL_SCHEMA},
    }
    answer = await task.ask(SEAL_QUESTION, "waiting for a person to confirm the seal", request)
    action = answer.get("action")
    content = answer.get("content")
    if action == "accept" and isinstance(content, dict) and content.get("seal") is True:
        return
    said = "declined" if action == "decline" else "cancelled" if action == "cancel" else "answered no"
    raise CaseopsError(
        "EXPORT_NOT_CONFIRMED", f"the seal of the bundle was not confirmed (the client {said})"
    )

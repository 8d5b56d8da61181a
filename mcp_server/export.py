"""The evidence export: a case's bundle (snapshot, policy, every source document) gathered in stages.

Each stage is a read and a pause standing for the document store a real export pulls files from
(``ToolServerConfig.export_stage_ms``; a few seconds in all by default, less in tests). Run as an MCP task, each
stage is reported as the task's ``statusMessage`` and a cancelled task stops at the next stage; the bundle is
written in the same transaction that completes the task, so a cancelled export leaves no bundle behind.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets

import asyncpg

from dag.fingerprint import canonical_json
from mcp_server.caseops import CaseopsRepository
from mcp_server.contracts import EvidenceBundle, ExportedDocument
from mcp_server.task_store import current_task


def bundle_digest(bundle: EvidenceBundle) -> str:
    """sha256 of the bundle's content: the same case at the same version exports to the same digest."""
    content = bundle.model_dump(mode="json", exclude={"digest", "export_id"})
    return hashlib.sha256(canonical_json(content).encode()).hexdigest()


async def export_evidence(pool: asyncpg.Pool, tenant_id: str, case_id: str, stage_ms: int) -> EvidenceBundle:
    """Export the case's evidence bundle; see the module docstring."""
    task = current_task.get()
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

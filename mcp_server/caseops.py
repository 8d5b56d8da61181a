"""The caseops tools' queries. Every query is scoped to the tenant of the caller's task token."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from dag.errors import RaydagError
from mcp_server.contracts import (
    AliasResolution,
    CaseSnapshot,
    DocumentRequest,
    DocumentRequestDraft,
    DocumentRequestLookup,
    PolicyRequirements,
    RequiredDocument,
    UnclassifiedDocument,
    UnclassifiedDocuments,
)
from mcp_server.domain import newest_rule, normalize_label, with_offset
from mcp_server.evidence import PolicyEvidence, SourceDocument, case_uri, policy_uri, request_uri


class CaseopsError(RaydagError):
    """A business error with a stable machine-readable code, returned to the caller as an isError result."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def case_not_found(case_id: str) -> CaseopsError:
    # One answer for "no such case" and "another tenant's case": existence must not leak across tenants.
    return CaseopsError("CASE_NOT_FOUND", f"case {case_id!r} was not found")


@dataclass(frozen=True)
class _Rule:
    canonical_code: str
    rule_version: str
    confidence: float


class CaseopsRepository:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def case_snapshot(self, tenant_id: str, case_id: str) -> CaseSnapshot:
        row = await self._pool.fetchrow(
            f"{_CASE_COLUMNS} WHERE tenant_id = $1 AND case_id = $2 ORDER BY version DESC LIMIT 1",
            tenant_id,
            case_id,
        )
        if row is None:
            raise case_not_found(case_id)
        return _snapshot(row)

    async def case_at_version(self, tenant_id: str, case_id: str, version: int) -> CaseSnapshot | None:
        """One recorded version of a case (``case://{case_id}@{version}``), or ``None``."""
        row = await self._pool.fetchrow(
            f"{_CASE_COLUMNS} WHERE tenant_id = $1 AND case_id = $2 AND version = $3",
            tenant_id,
            case_id,
            version,
        )
        return None if row is None else _snapshot(row)

    async def policy_requirements(self, tenant_id: str, case_id: str) -> PolicyRequirements:
        snapshot = await self.case_snapshot(tenant_id, case_id)
        rows = await self._pool.fetch(
            """SELECT p.effective_from, d.code, d.label
               FROM policies p
               LEFT JOIN policy_required_documents d USING (tenant_id, policy_id, version)
               WHERE p.tenant_id = $1 AND p.policy_id = $2 AND p.version = $3
               ORDER BY d.position""",
            tenant_id,
            snapshot.policy_id,
            snapshot.policy_version,
        )
        if not rows:
            raise CaseopsError(
                "POLICY_NOT_FOUND", f"policy {snapshot.policy_id}@{snapshot.policy_version} was not found"
            )
        return PolicyRequirements(
            case_id=case_id,
            policy_id=snapshot.policy_id,
            policy_version=snapshot.policy_version,
            effective_from=rows[0]["effective_from"],
            required_documents=[
                RequiredDocument(code=row["code"], label=row["label"])
                for row in rows
                if row["code"] is not None
            ],
            evidence_ref=policy_uri(snapshot.policy_id, snapshot.policy_version),
        )

    async def unclassified_documents(self, tenant_id: str, case_id: str) -> UnclassifiedDocuments:
        await self._require_case(tenant_id, case_id)
        rows = await self._pool.fetch(
            """SELECT document_id, source_label, source_ref, captured_at, captured_at_offset_minutes
               FROM source_documents
               WHERE tenant_id = $1 AND case_id = $2 AND canonical_code IS NULL
               ORDER BY document_id""",
            tenant_id,
            case_id,
        )
        return UnclassifiedDocuments(
            case_id=case_id,
            documents=[
                UnclassifiedDocument(
                    document_id=row["document_id"],
                    source_label=row["source_label"],
                    source_ref=row["source_ref"],
                    captured_at=with_offset(row["captured_at"], row["captured_at_offset_minutes"]),
                )
                for row in rows
            ],
        )

    async def resolve_document_alias(self, tenant_id: str, case_id: str, document_id: str) -> AliasResolution:
        await self._require_case(tenant_id, case_id)
        document = await self._pool.fetchrow(
            """SELECT source_label, source_ref FROM source_documents
               WHERE tenant_id = $1 AND case_id = $2 AND document_id = $3""",
            tenant_id,
            case_id,
            document_id,
        )
        if document is None:
            raise CaseopsError(
                "DOCUMENT_NOT_FOUND", f"document {document_id!r} is not a document of this case"
            )
        rows = await self._pool.fetch(
            """SELECT canonical_code, rule_version, confidence FROM document_aliases
               WHERE tenant_id = $1 AND normalized_label = $2 AND active""",
            tenant_id,
            normalize_label(document["source_label"]),
        )
        rule = newest_rule(
            _Rule(row["canonical_code"], row["rule_version"], float(row["confidence"])) for row in rows
        )
        return AliasResolution(
            case_id=case_id,
            document_id=document_id,
            source_label=document["source_label"],
            resolved=rule is not None,
            canonical_code=rule.canonical_code if rule else None,
            rule_version=rule.rule_version if rule else None,
            confidence=rule.confidence if rule else None,
            source_ref=document["source_ref"],
        )

    async def policy_of_case(
        self, tenant_id: str, case_id: str, policy_id: str, version: str
    ) -> PolicyEvidence | None:
        """A policy version that some version of the case is under, or ``None``: a token bound to a case
        reads only the policies that case cites."""
        rows = await self._pool.fetch(
            """SELECT p.effective_from, d.code, d.label
               FROM policies p
               LEFT JOIN policy_required_documents d USING (tenant_id, policy_id, version)
               WHERE p.tenant_id = $1 AND p.policy_id = $3 AND p.version = $4
                 AND EXISTS (SELECT 1 FROM cases c WHERE c.tenant_id = $1 AND c.case_id = $2
                             AND c.policy_id = $3 AND c.policy_version = $4)
               ORDER BY d.position""",
            tenant_id,
            case_id,
            policy_id,
            version,
        )
        if not rows:
            return None
        return PolicyEvidence(
            policy_id=policy_id,
            policy_version=version,
            effective_from=rows[0]["effective_from"],
            required_documents=[
                RequiredDocument(code=row["code"], label=row["label"])
                for row in rows
                if row["code"] is not None
            ],
            evidence_ref=policy_uri(policy_id, version),
        )

    async def source_document(self, tenant_id: str, case_id: str, source_ref: str) -> SourceDocument | None:
        """The case's source document whose ``source_ref`` is exactly ``source_ref``, or ``None``."""
        row = await self._pool.fetchrow(
            f"{_DOCUMENT_COLUMNS} WHERE tenant_id = $1 AND case_id = $2 AND source_ref = $3",
            tenant_id,
            case_id,
            source_ref,
        )
        return None if row is None else _source_document(row)

    async def source_documents(self, tenant_id: str, case_id: str) -> list[SourceDocument]:
        rows = await self._pool.fetch(
            f"{_DOCUMENT_COLUMNS} WHERE tenant_id = $1 AND case_id = $2 ORDER BY document_id",
            tenant_id,
            case_id,
        )
        return [_source_document(row) for row in rows]

    async def draft_document_request(
        self, tenant_id: str, case_id: str, missing: list[str], idempotency_key: str
    ) -> DocumentRequestDraft:
        """Draft a request for ``missing`` documents; a repeated key answers the draft it made first."""
        await self._require_case(tenant_id, case_id)
        codes = sorted(set(missing))
        message = f"To complete claim {case_id}, please send: {', '.join(codes)}."
        row = await self._pool.fetchrow(
            """WITH made AS (
                   INSERT INTO document_request_drafts
                       (tenant_id, draft_id, case_id, missing_document_codes, message, idempotency_key)
                   VALUES ($1, 'DRAFT-' || substr(md5($1 || '/' || $4), 1, 12), $2, $3, $5, $4)
                   ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
                   RETURNING draft_id, case_id, missing_document_codes, message
               )
               SELECT * FROM made
               UNION ALL
               SELECT draft_id, case_id, missing_document_codes, message FROM document_request_drafts
               WHERE tenant_id = $1 AND idempotency_key = $4 AND NOT EXISTS (SELECT 1 FROM made)""",
            tenant_id,
            case_id,
            codes,
            idempotency_key,
            message,
        )
        assert row is not None
        if row["case_id"] != case_id:
            raise CaseopsError("IDEMPOTENCY_KEY_REUSED", "this idempotency key was used for another case")
        return DocumentRequestDraft(
            draft_id=row["draft_id"],
            case_id=row["case_id"],
            missing_document_codes=list(row["missing_document_codes"]),
            message=row["message"],
        )

    async def send_document_request(
        self, tenant_id: str, case_id: str, draft_id: str, idempotency_key: str
    ) -> DocumentRequest:
        """Put the drafted request in the outbox, once per key: a repeated key answers the first send."""
        async with self._pool.acquire() as connection, connection.transaction():
            draft = await connection.fetchrow(
                """SELECT missing_document_codes FROM document_request_drafts
                   WHERE tenant_id = $1 AND draft_id = $2 AND case_id = $3""",
                tenant_id,
                draft_id,
                case_id,
            )
            if draft is None:
                raise CaseopsError("DRAFT_NOT_FOUND", f"draft {draft_id!r} is not a draft of this case")
            await connection.execute(
                """INSERT INTO document_request_outbox
                       (tenant_id, request_id, case_id, draft_id, missing_document_codes, idempotency_key)
                   VALUES ($1, 'REQ-' || substr(md5($1 || '/' || $5), 1, 12), $2, $3, $4, $5)
                   ON CONFLICT (tenant_id, idempotency_key) DO NOTHING""",
                tenant_id,
                case_id,
                draft_id,
                draft["missing_document_codes"],
                idempotency_key,
            )
            sent = await self._sent(connection, tenant_id, idempotency_key)
        assert sent is not None
        if sent.case_id != case_id or sent.draft_id != draft_id:
            raise CaseopsError("IDEMPOTENCY_KEY_REUSED", "this idempotency key was used for another request")
        return sent

    async def find_document_request(
        self, tenant_id: str, case_id: str, idempotency_key: str
    ) -> DocumentRequestLookup:
        """The request sent under ``idempotency_key`` for the case, if any."""
        async with self._pool.acquire() as connection:
            sent = await self._sent(connection, tenant_id, idempotency_key)
        if sent is not None and sent.case_id != case_id:
            sent = None  # another case's request does not exist for this one
        return DocumentRequestLookup(case_id=case_id, found=sent is not None, request=sent)

    @staticmethod
    async def _sent(connection: asyncpg.Connection, tenant_id: str, key: str) -> DocumentRequest | None:
        row = await connection.fetchrow(
            """SELECT request_id, case_id, draft_id, missing_document_codes, sent_at
               FROM document_request_outbox WHERE tenant_id = $1 AND idempotency_key = $2""",
            tenant_id,
            key,
        )
        if row is None:
            return None
        return DocumentRequest(
            request_id=row["request_id"],
            case_id=row["case_id"],
            draft_id=row["draft_id"],
            missing_document_codes=list(row["missing_document_codes"]),
            sent_at=row["sent_at"],
            evidence_ref=request_uri(row["case_id"], row["request_id"]),
        )

    async def _require_case(self, tenant_id: str, case_id: str) -> None:
        exists = await self._pool.fetchval(
            "SELECT 1 FROM cases WHERE tenant_id = $1 AND case_id = $2 LIMIT 1", tenant_id, case_id
        )
        if not exists:
            raise case_not_found(case_id)


_CASE_COLUMNS = """SELECT case_id, version, status, policy_id, policy_version, submitted_at,
                          submitted_at_offset_minutes, received_document_codes
                   FROM cases"""
_DOCUMENT_COLUMNS = """SELECT case_id, document_id, source_label, canonical_code, source_ref, captured_at,
                              captured_at_offset_minutes
                       FROM source_documents"""


def _snapshot(row: asyncpg.Record) -> CaseSnapshot:
    return CaseSnapshot(
        case_id=row["case_id"],
        version=row["version"],
        status=row["status"],
        policy_id=row["policy_id"],
        policy_version=row["policy_version"],
        submitted_at=with_offset(row["submitted_at"], row["submitted_at_offset_minutes"]),
        received_document_codes=sorted(row["received_document_codes"]),
        evidence_ref=case_uri(row["case_id"], row["version"]),
    )


def _source_document(row: asyncpg.Record) -> SourceDocument:
    return SourceDocument(
        case_id=row["case_id"],
        document_id=row["document_id"],
        source_label=row["source_label"],
        canonical_code=row["canonical_code"],
        captured_at=with_offset(row["captured_at"], row["captured_at_offset_minutes"]),
        source_ref=row["source_ref"],
    )

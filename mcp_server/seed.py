"""``raydag seed FILE.json``: load domain data idempotently (loading a file twice changes nothing)."""

from __future__ import annotations

import json
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated

import asyncpg
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mcp_server.domain import normalize_label, offset_minutes, rule_version_key


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tenant(_Row):
    tenant_id: str
    name: str


class RequiredDocumentRow(_Row):
    code: str
    label: str


class PolicyRow(_Row):
    tenant_id: str
    policy_id: str
    version: str
    effective_from: date
    required_documents: list[RequiredDocumentRow]


class CaseRow(_Row):
    tenant_id: str
    case_id: str
    version: Annotated[int, Field(gt=0)]
    status: str
    policy_id: str
    policy_version: str
    submitted_at: AwareDatetime
    received_document_codes: list[str] = []


class SourceDocumentRow(_Row):
    tenant_id: str
    document_id: str
    case_id: str
    source_label: str
    canonical_code: str | None = None
    source_ref: str
    captured_at: AwareDatetime


class DocumentAliasRow(_Row):
    tenant_id: str
    normalized_label: str
    canonical_code: str
    rule_version: Annotated[str, Field(pattern=r"^[0-9]+(\.[0-9]+)*$")]
    confidence: Annotated[float, Field(ge=0, le=1)]
    active: bool


class SeedData(_Row):
    """The seed file format (docs/CASEOPS.md, Seed files)."""

    tenants: list[Tenant] = []
    policies: list[PolicyRow] = []
    cases: list[CaseRow] = []
    source_documents: list[SourceDocumentRow] = []
    document_aliases: list[DocumentAliasRow] = []

    @classmethod
    def from_file(cls, path: Path) -> SeedData:
        return cls.model_validate_json(path.read_bytes())


def demo_seed() -> SeedData:
    """The fixture shipped with raydag: case C-102 and friends."""
    text = resources.files("mcp_server").joinpath("fixtures/demo.json").read_text(encoding="utf-8")
    return SeedData.model_validate(json.loads(text))


def _split(moment: datetime) -> tuple[datetime, int]:
    return moment, offset_minutes(moment)


async def load_seed(connection: asyncpg.Connection, data: SeedData) -> dict[str, int]:
    """Upsert everything in one transaction; return how many rows of each kind the file held."""
    async with connection.transaction():
        await connection.executemany(
            """INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)
               ON CONFLICT (tenant_id) DO UPDATE SET name = EXCLUDED.name""",
            [(tenant.tenant_id, tenant.name) for tenant in data.tenants],
        )
        for policy in data.policies:
            key = (policy.tenant_id, policy.policy_id, policy.version)
            await connection.execute(
                """INSERT INTO policies (tenant_id, policy_id, version, effective_from) VALUES ($1, $2, $3, $4)
                   ON CONFLICT (tenant_id, policy_id, version)
                   DO UPDATE SET effective_from = EXCLUDED.effective_from""",
                *key,
                policy.effective_from,
            )
            await connection.execute(
                "DELETE FROM policy_required_documents WHERE tenant_id = $1 AND policy_id = $2 AND version = $3",
                *key,
            )
            await connection.executemany(
                """INSERT INTO policy_required_documents (tenant_id, policy_id, version, position, code, label)
                   VALUES ($1, $2, $3, $4, $5, $6)""",
                [
                    (*key, position, doc.code, doc.label)
                    for position, doc in enumerate(policy.required_documents)
                ],
            )
        await connection.executemany(
            """INSERT INTO cases (tenant_id, case_id, version, status, policy_id, policy_version,
                                  submitted_at, submitted_at_offset_minutes, received_document_codes)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
               ON CONFLICT (tenant_id, case_id, version) DO UPDATE SET
                   status = EXCLUDED.status, policy_id = EXCLUDED.policy_id,
                   policy_version = EXCLUDED.policy_version, submitted_at = EXCLUDED.submitted_at,
                   submitted_at_offset_minutes = EXCLUDED.submitted_at_offset_minutes,
                   received_document_codes = EXCLUDED.received_document_codes""",
            [
                (
                    row.tenant_id,
                    row.case_id,
                    row.version,
                    row.status,
                    row.policy_id,
                    row.policy_version,
                    *_split(row.submitted_at),
                    sorted(set(row.received_document_codes)),
                )
                for row in data.cases
            ],
        )
        await connection.executemany(
            """INSERT INTO source_documents (tenant_id, document_id, case_id, source_label, canonical_code,
                                             source_ref, captured_at, captured_at_offset_minutes)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
               ON CONFLICT (tenant_id, document_id) DO UPDATE SET
                   case_id = EXCLUDED.case_id, source_label = EXCLUDED.source_label,
                   canonical_code = EXCLUDED.canonical_code, source_ref = EXCLUDED.source_ref,
                   captured_at = EXCLUDED.captured_at,
                   captured_at_offset_minutes = EXCLUDED.captured_at_offset_minutes""",
            [
                (
                    row.tenant_id,
                    row.document_id,
                    row.case_id,
                    row.source_label,
                    row.canonical_code,
                    row.source_ref,
                    *_split(row.captured_at),
                )
                for row in data.source_documents
            ],
        )
        await connection.executemany(
            """INSERT INTO document_aliases (tenant_id, normalized_label, canonical_code, rule_version,
                                             confidence, active)
               VALUES ($1, $2, $3, $4, $5, $6)
               ON CONFLICT (tenant_id, normalized_label, rule_version) DO UPDATE SET
                   canonical_code = EXCLUDED.canonical_code, confidence = EXCLUDED.confidence,
                   active = EXCLUDED.active""",
            [
                (
                    row.tenant_id,
                    normalize_label(row.normalized_label),
                    row.canonical_code,
                    ".".join(str(segment) for segment in rule_version_key(row.rule_version)),
                    row.confidence,
                    row.active,
                )
                for row in data.document_aliases
            ],
        )
    return {
        "tenants": len(data.tenants),
        "policies": len(data.policies),
        "cases": len(data.cases),
        "source_documents": len(data.source_documents),
        "document_aliases": len(data.document_aliases),
    }


async def load(connection: asyncpg.Connection, path: Path | None) -> dict[str, int]:
    """The seed file at ``path``, or the demo fixture (``None``), into the database (``hosting.seed`` in
    ``caseops.yaml``: ``raydag seed``); rows per kind. ``ValidationError`` for a file that is not a seed."""
    return await load_seed(connection, demo_seed() if path is None else SeedData.from_file(path))

"""Evidence resources: the URIs a run cites, their templates, the scope each needs, and what a read returns.

Pure declarations shared by the HTTP guard (which decides scope) and the MCP server (which serves reads).
"""

from __future__ import annotations

from datetime import date, datetime

from pydantic import BaseModel, Field

from mcp_server.contracts import SCOPE_CASES, SCOPE_DOCUMENTS, SCOPE_POLICIES, RequiredDocument

CASE_TEMPLATE = "case://{case_id}@{version}"
POLICY_TEMPLATE = "policy://{policy_id}@{version}"
DOCUMENT_TEMPLATE = "evidence://{case_id}/{document_id}@{version}"

SCOPE_OF_SCHEME = {"case": SCOPE_CASES, "policy": SCOPE_POLICIES, "evidence": SCOPE_DOCUMENTS}
"""The scope a token needs to read a resource, by URI scheme; the same scope as the tool that cites it."""

JSON = "application/json"


def scope_for_uri(uri: str) -> str | None:
    """The scope reading ``uri`` needs, or ``None`` for a scheme this server does not serve."""
    scheme, separator, _ = uri.partition("://")
    return SCOPE_OF_SCHEME.get(scheme) if separator else None


def case_uri(case_id: str, version: int) -> str:
    return f"case://{case_id}@{version}"


def policy_uri(policy_id: str, version: str) -> str:
    return f"policy://{policy_id}@{version}"


def request_uri(case_id: str, request_id: str) -> str:
    return f"request://{case_id}/{request_id}"


class PolicyEvidence(BaseModel):
    """A policy version as a resource: the documents it requires."""

    policy_id: str
    policy_version: str
    effective_from: date
    required_documents: list[RequiredDocument]
    evidence_ref: str = Field(description="policy://{policy_id}@{version}")


class SourceDocument(BaseModel):
    """A source document of a case as a resource: its label, code (if classified) and capture time."""

    case_id: str
    document_id: str
    source_label: str
    canonical_code: str | None
    captured_at: datetime
    source_ref: str = Field(description="evidence://{case_id}/{document_id}@{version}")

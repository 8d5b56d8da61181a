"""The caseops tool contracts: one declaration read by the MCP server, the policy and the planner catalogue."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from dag.contracts import Risk, ToolContract, catalogue_of

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"

CaseId = Annotated[
    str,
    Field(min_length=1, max_length=64, pattern=IDENTIFIER_PATTERN, description="The claim case, e.g. C-102."),
]
DocumentId = Annotated[
    str,
    Field(
        min_length=1, max_length=64, pattern=IDENTIFIER_PATTERN, description="A source document of the case."
    ),
]

SCOPE_CASES = "cases:read"
SCOPE_POLICIES = "policies:read"
SCOPE_DOCUMENTS = "documents:read"
ALL_SCOPES = (SCOPE_CASES, SCOPE_POLICIES, SCOPE_DOCUMENTS)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseInput(_Input):
    case_id: CaseId


class DocumentInput(_Input):
    case_id: CaseId
    document_id: DocumentId


class CaseSnapshot(BaseModel):
    case_id: str
    version: int
    status: str
    policy_id: str
    policy_version: str
    submitted_at: datetime
    received_document_codes: list[str]
    evidence_ref: str = Field(description="case://{case_id}@{version}")


class RequiredDocument(BaseModel):
    code: str
    label: str


class PolicyRequirements(BaseModel):
    case_id: str
    policy_id: str
    policy_version: str
    effective_from: date
    required_documents: list[RequiredDocument]
    evidence_ref: str = Field(description="policy://{policy_id}@{version}")


class UnclassifiedDocument(BaseModel):
    document_id: str
    source_label: str
    source_ref: str
    captured_at: datetime


class UnclassifiedDocuments(BaseModel):
    case_id: str
    documents: list[UnclassifiedDocument]


class AliasResolution(BaseModel):
    case_id: str
    document_id: str
    source_label: str
    resolved: bool
    canonical_code: str | None
    rule_version: str | None
    confidence: float | None
    source_ref: str


RUN_CASE = frozenset({"case_id"})
"""Every caseops tool is about the run's case: ``case_id`` is bound to the resource's ``case_id``."""

GET_CASE_SNAPSHOT = ToolContract(
    name="caseops_get_case_snapshot",
    version="1.0.0",
    description="The current snapshot of a claim case: status, policy and the document codes received.",
    scope=SCOPE_CASES,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=RUN_CASE,
    output_model=CaseSnapshot,
)
GET_POLICY_REQUIREMENTS = ToolContract(
    name="caseops_get_policy_requirements",
    version="1.0.0",
    description="The documents the case's policy version requires.",
    scope=SCOPE_POLICIES,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=RUN_CASE,
    output_model=PolicyRequirements,
)
LIST_UNCLASSIFIED_DOCUMENTS = ToolContract(
    name="caseops_list_unclassified_documents",
    version="1.0.0",
    description="Source documents of the case that have no canonical document code yet.",
    scope=SCOPE_DOCUMENTS,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=RUN_CASE,
    output_model=UnclassifiedDocuments,
)
RESOLVE_DOCUMENT_ALIAS = ToolContract(
    name="caseops_resolve_document_alias",
    version="1.0.0",
    description="Map a source document's label to a canonical document code with the newest active alias rule.",
    scope=SCOPE_DOCUMENTS,
    risk=Risk.READ_ONLY,
    input_model=DocumentInput,
    output_model=AliasResolution,
    run_bound=RUN_CASE,
    observed_bound=frozenset({"document_id"}),
)

CASEOPS_TOOLS = catalogue_of(
    GET_CASE_SNAPSHOT, GET_POLICY_REQUIREMENTS, LIST_UNCLASSIFIED_DOCUMENTS, RESOLVE_DOCUMENT_ALIAS
)

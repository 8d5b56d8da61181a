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
SCOPE_REQUESTS = "documents:request"
ALL_SCOPES = (SCOPE_CASES, SCOPE_POLICIES, SCOPE_DOCUMENTS, SCOPE_REQUESTS)

INVESTIGATE_STAGE = "investigate"
ACT_STAGE = "act"
"""The stage of a run that may act on what it found: request missing documents from the claimant."""

DocumentCode = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]
IdempotencyKey = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=IDENTIFIER_PATTERN,
        description="The caller's key for this one business intent: a repeated call with it acts once.",
    ),
]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseInput(_Input):
    case_id: CaseId


class ExportInput(_Input):
    case_id: CaseId
    confirm: bool = Field(
        default=False,
        description=(
            "Ask a person to confirm before the bundle is sealed (only a client of the MCP Tasks extension "
            "of 2026-07-28 can be asked; any other is refused CONFIRMATION_UNAVAILABLE)."
        ),
    )


class DocumentInput(_Input):
    case_id: CaseId
    document_id: DocumentId


class DraftRequestInput(_Input):
    case_id: CaseId
    missing_document_codes: Annotated[list[DocumentCode], Field(min_length=1, max_length=20)]
    idempotency_key: IdempotencyKey


class SendRequestInput(_Input):
    case_id: CaseId
    draft_id: Annotated[str, Field(min_length=1, max_length=64, pattern=IDENTIFIER_PATTERN)]
    idempotency_key: IdempotencyKey


class FindRequestInput(_Input):
    case_id: CaseId
    idempotency_key: IdempotencyKey


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


class DocumentRequestDraft(BaseModel):
    draft_id: str
    case_id: str
    missing_document_codes: list[str]
    message: str


class DocumentRequest(BaseModel):
    request_id: str
    case_id: str
    draft_id: str
    missing_document_codes: list[str]
    sent_at: datetime
    evidence_ref: str = Field(description="request://{case_id}/{request_id}")


class DocumentRequestLookup(BaseModel):
    case_id: str
    found: bool
    request: DocumentRequest | None


class ExportedDocument(BaseModel):
    document_id: str
    source_label: str
    canonical_code: str | None
    source_ref: str


class EvidenceBundle(BaseModel):
    """A case's evidence, exported at one version: what an auditor or a court receives."""

    export_id: str
    case_id: str
    case_version: int
    policy_id: str
    policy_version: str
    documents: list[ExportedDocument]
    evidence_refs: list[str] = Field(description="Every resource the bundle holds, sorted.")
    digest: str = Field(description="sha256 of the bundle's canonical JSON without its digest and export_id.")


RUN_CASE = frozenset({"case_id"})
"""Every caseops tool is about the run's case: ``case_id`` is bound to the resource's ``case_id``."""
CHECK_STAGES = frozenset({INVESTIGATE_STAGE, ACT_STAGE})
"""The checks are made in either stage: a run that acts checks first."""

GET_CASE_SNAPSHOT = ToolContract(
    name="caseops_get_case_snapshot",
    version="1.0.0",
    description="The current snapshot of a claim case: status, policy and the document codes received.",
    scope=SCOPE_CASES,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=RUN_CASE,
    output_model=CaseSnapshot,
    stages=CHECK_STAGES,
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
    stages=CHECK_STAGES,
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
    stages=CHECK_STAGES,
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
    stages=CHECK_STAGES,
)

DRAFT_DOCUMENT_REQUEST = ToolContract(
    name="caseops_draft_document_request",
    version="1.0.0",
    description="Draft a request to the claimant for the documents the case is missing (not sent).",
    scope=SCOPE_REQUESTS,
    risk=Risk.REVERSIBLE_WRITE,
    input_model=DraftRequestInput,
    output_model=DocumentRequestDraft,
    run_bound=RUN_CASE,
    stages=frozenset({ACT_STAGE}),
)
SEND_DOCUMENT_REQUEST = ToolContract(
    name="caseops_send_document_request",
    version="1.0.0",
    description="Send a drafted document request to the claimant. It cannot be unsent.",
    scope=SCOPE_REQUESTS,
    risk=Risk.IRREVERSIBLE_WRITE,
    input_model=SendRequestInput,
    output_model=DocumentRequest,
    run_bound=RUN_CASE,
    stages=frozenset({ACT_STAGE}),
)
FIND_DOCUMENT_REQUEST = ToolContract(
    name="caseops_find_document_request",
    version="1.0.0",
    description="Whether a document request was sent under an idempotency key, and what was sent.",
    scope=SCOPE_REQUESTS,
    risk=Risk.READ_ONLY,
    input_model=FindRequestInput,
    output_model=DocumentRequestLookup,
    run_bound=RUN_CASE,
    stages=frozenset({ACT_STAGE}),
)

EXPORT_EVIDENCE = ToolContract(
    name="caseops_export_evidence",
    version="1.0.0",
    description=(
        "Export the case's evidence bundle (snapshot, policy, every source document), in stages; it takes "
        "seconds and runs as an MCP task."
    ),
    scope=SCOPE_DOCUMENTS,
    risk=Risk.READ_ONLY,
    input_model=ExportInput,
    output_model=EvidenceBundle,
    run_bound=RUN_CASE,
    stages=CHECK_STAGES,
)

CASEOPS_CHECKS = catalogue_of(
    GET_CASE_SNAPSHOT, GET_POLICY_REQUIREMENTS, LIST_UNCLASSIFIED_DOCUMENTS, RESOLVE_DOCUMENT_ALIAS
)
"""The four checks: every tool a run of the default stage (``investigate``) is offered."""
CASEOPS_TOOLS = catalogue_of(
    GET_CASE_SNAPSHOT,
    GET_POLICY_REQUIREMENTS,
    LIST_UNCLASSIFIED_DOCUMENTS,
    RESOLVE_DOCUMENT_ALIAS,
    DRAFT_DOCUMENT_REQUEST,
    SEND_DOCUMENT_REQUEST,
    FIND_DOCUMENT_REQUEST,
    EXPORT_EVIDENCE,
)

"""C-102 as the caseops tools answer it, and the result a run must reach: one copy for every test."""

from __future__ import annotations

from typing import Any

from mcp_server.contracts import AliasResolution, CaseSnapshot, PolicyRequirements, UnclassifiedDocuments

CASE_OUTPUT: dict[str, Any] = {
    "case_id": "C-102",
    "version": 7,
    "status": "waiting_for_documents",
    "policy_id": "motor-claim-standard",
    "policy_version": "2026.1",
    "submitted_at": "2026-07-18T09:30:00+08:00",
    "received_document_codes": ["IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
    "evidence_ref": "case://C-102@7",
}
POLICY_OUTPUT: dict[str, Any] = {
    "case_id": "C-102",
    "policy_id": "motor-claim-standard",
    "policy_version": "2026.1",
    "effective_from": "2026-01-01",
    "required_documents": [
        {"code": "LOSS_STATEMENT", "label": "Statement of loss"},
        {"code": "IDENTITY_DOCUMENT", "label": "Identity document"},
        {"code": "ACCIDENT_CERTIFICATE", "label": "Traffic accident certificate"},
    ],
    "evidence_ref": "policy://motor-claim-standard@2026.1",
}


def document(document_id: str) -> dict[str, Any]:
    return {
        "document_id": document_id,
        "source_label": "道路交通事故認定書",
        "source_ref": f"evidence://C-102/{document_id}@1",
        "captured_at": "2026-07-19T11:02:00+08:00",
    }


DOCS_OUTPUT: dict[str, Any] = {"case_id": "C-102", "documents": [document("DOC-C102-003")]}
RESOLVE_OUTPUT: dict[str, Any] = {
    "case_id": "C-102",
    "document_id": "DOC-C102-003",
    "source_label": "道路交通事故認定書",
    "resolved": True,
    "canonical_code": "ACCIDENT_CERTIFICATE",
    "rule_version": "2026.1",
    "confidence": 1.0,
    "source_ref": "evidence://C-102/DOC-C102-003@1",
}
for model, sample in (
    (CaseSnapshot, CASE_OUTPUT),
    (PolicyRequirements, POLICY_OUTPUT),
    (UnclassifiedDocuments, DOCS_OUTPUT),
    (AliasResolution, RESOLVE_OUTPUT),
):
    model.model_validate(sample)  # the scripted outputs are what the real tools could answer

C102_RESULT = {
    "outcome": "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
    "received_document_codes": ["IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
    "resolved_document_codes": ["ACCIDENT_CERTIFICATE"],
    "missing_document_codes": [],
    "unresolved_document_ids": [],
    "evidence_refs": [
        "case://C-102@7",
        "evidence://C-102/DOC-C102-003@1",
        "policy://motor-claim-standard@2026.1",
    ],
}


# What a model planner answers for C-102: the plan (as the strict schema shapes it) and the final answer.
C102_PLAN = {
    "nodes": [
        {
            "id": "case",
            "tool": "caseops_get_case_snapshot",
            "args": {"case_id": "C-102"},
            "for_each": None,
            "after": [],
        },
        {
            "id": "policy",
            "tool": "caseops_get_policy_requirements",
            "args": {"case_id": "C-102"},
            "for_each": None,
            "after": [],
        },
        {
            "id": "docs",
            "tool": "caseops_list_unclassified_documents",
            "args": {"case_id": "C-102"},
            "for_each": None,
            "after": [],
        },
        {
            "id": "resolve",
            "tool": "caseops_resolve_document_alias",
            "args": {"case_id": "C-102", "document_id": {"item": "/document_id"}},
            "for_each": {"ref": "docs", "pointer": "/documents"},
            "after": [],
        },
    ]
}
CITATIONS = [
    "IDENTITY_DOCUMENT",
    "LOSS_STATEMENT",
    "ACCIDENT_CERTIFICATE",
    "case://C-102@7",
    "evidence://C-102/DOC-C102-003@1",
    "policy://motor-claim-standard@2026.1",
]
FINAL = {
    "decision": "final",
    "reason": "every required document is accounted for",
    "result": C102_RESULT,
    "citations": CITATIONS,
}

"""Hand-built run events for the reducer and scheduler tests; no supervisor, no Ray, no store."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from hypothesis import settings
from pydantic import BaseModel, ConfigDict

from dag.budget import Budgets
from dag.contracts import BindingMatch, RunBinding
from dag.events import (
    ErrorKind,
    NodeDispatched,
    NodeError,
    NodeExpanded,
    NodeFailed,
    NodeSucceeded,
    PlanAccepted,
    PlanningStarted,
    RunCreated,
    RunEvent,
)
from dag.fingerprint import action_fingerprint
from dag.policy import Decision
from dag.run_state import RunState, fold
from mcp_server.contracts import ALL_SCOPES, GET_CASE_SNAPSHOT

AT = datetime(2025, 4, 1, 9, 0, tzinfo=UTC)
CASE_ID = "C-102"
CASE_TOOL = "caseops_get_case_snapshot"
POLICY_TOOL = "caseops_get_policy_requirements"
DOCUMENTS_TOOL = "caseops_list_unclassified_documents"
RESOLVE_TOOL = "caseops_resolve_document_alias"
ALLOW = Decision(allowed=True, rule_id="allow.read_only_in_scope", reason="test")


class PathInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str


READ_FILE = dataclasses.replace(
    GET_CASE_SNAPSHOT,
    name="read_file",
    input_model=PathInput,
    run_bound=frozenset({"path"}),
    resource_keys=(RunBinding("path", "root", BindingMatch.PATH_WITHIN),),
)
"""A tool of another toolset: its ``path`` must lie under the run's ``root``."""

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, database=None)
"""Hypothesis settings for this folder: bounded, no deadline flakiness, nothing written to disk."""


def run_created(*, case_id: str = CASE_ID, budgets: Budgets | None = None) -> RunCreated:
    return RunCreated(
        at=AT,
        run_id="run-1",
        tenant_id="tenant-a",
        subject="adjuster-7",
        scopes=ALL_SCOPES,
        resource={"case_id": case_id},
        goal="check the documents of the case",
        planner="conformance",
        budgets=budgets or Budgets(),
    )


def accepted_events(plan: dict[str, Any]) -> list[RunEvent]:
    """RunCreated, PlanningStarted and PlanAccepted of ``plan``: a run about to schedule its first nodes."""
    return [run_created(), PlanningStarted(at=AT, round=1), PlanAccepted(at=AT, round=1, plan=plan)]


def running(plan: dict[str, Any], *more: RunEvent) -> RunState:
    return fold([*accepted_events(plan), *more])


def dispatched(node_id: str, tool: str, args: dict[str, Any]) -> NodeDispatched:
    return NodeDispatched(
        at=AT,
        node_id=node_id,
        tool=tool,
        args=args,
        fingerprint=action_fingerprint(tool, args),
        attempt=1,
        decision=ALLOW,
    )


def succeeded(node_id: str, output: Any) -> NodeSucceeded:
    return NodeSucceeded(at=AT, node_id=node_id, output=output, started_at=AT, finished_at=AT)


def failed(node_id: str, code: str = "UPSTREAM_DOWN") -> NodeFailed:
    error = NodeError(kind=ErrorKind.TRANSIENT, code=code, message="the tool did not answer")
    return NodeFailed(at=AT, node_id=node_id, error=error, started_at=AT, finished_at=AT)


def ran(node_id: str, tool: str, args: dict[str, Any], output: Any) -> list[RunEvent]:
    """Dispatch then success of one node."""
    return [dispatched(node_id, tool, args), succeeded(node_id, output)]


def expanded(node_id: str, count: int) -> NodeExpanded:
    return NodeExpanded(at=AT, node_id=node_id, count=count)


def documents_output(document_ids: Sequence[str]) -> dict[str, Any]:
    """An ``caseops_list_unclassified_documents`` output listing ``document_ids``."""
    return {
        "case_id": CASE_ID,
        "documents": [
            {
                "document_id": document_id,
                "source_label": f"label of {document_id}",
                "source_ref": f"doc://{CASE_ID}/{document_id}",
                "captured_at": "2025-03-30T10:00:00Z",
            }
            for document_id in document_ids
        ],
    }


def resolution_output(document_id: str, code: str) -> dict[str, Any]:
    return {
        "case_id": CASE_ID,
        "document_id": document_id,
        "source_label": f"label of {document_id}",
        "resolved": True,
        "canonical_code": code,
        "rule_version": "r1",
        "confidence": 0.9,
        "source_ref": f"doc://{CASE_ID}/{document_id}",
    }


CASE_OUTPUT: dict[str, Any] = {
    "case_id": CASE_ID,
    "version": 3,
    "status": "open",
    "policy_id": "P-HEALTH",
    "policy_version": "2024-10",
    "submitted_at": "2025-03-30T09:00:00Z",
    "received_document_codes": ["CLAIM_FORM"],
    "evidence_ref": f"case://{CASE_ID}@3",
}
POLICY_OUTPUT: dict[str, Any] = {
    "case_id": CASE_ID,
    "policy_id": "P-HEALTH",
    "policy_version": "2024-10",
    "effective_from": "2024-10-01",
    "required_documents": [
        {"code": "CLAIM_FORM", "label": "請求書"},
        {"code": "MEDICAL_CERT", "label": "診断書"},
    ],
    "evidence_ref": "policy://P-HEALTH@2024-10",
}
DOCUMENT_IDS = ("D-1", "D-2", "D-3")


def reads_done(*, documents: Any = None) -> list[RunEvent]:
    """The three independent reads of the example plan, all succeeded; ``docs`` lists ``documents``."""
    docs_output = documents_output(DOCUMENT_IDS) if documents is None else documents
    return [
        *ran("case", CASE_TOOL, {"case_id": CASE_ID}, CASE_OUTPUT),
        *ran("policy", POLICY_TOOL, {"case_id": CASE_ID}, POLICY_OUTPUT),
        *ran("docs", DOCUMENTS_TOOL, {"case_id": CASE_ID}, docs_output),
    ]


def resolve_args_of(document_id: str) -> dict[str, Any]:
    return {"case_id": CASE_ID, "document_id": document_id}

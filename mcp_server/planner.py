"""caseops' conformance planner: a deterministic protocol driver for its document checks, not an agent.

It proposes the same four-step DAG for any case and computes the result from observations alone, so the
control plane can be exercised end to end without a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from dag.fingerprint import action_fingerprint
from dag.states import NodeStatus, StopReason
from planner.base import Final, JoinDecision, NeedsHuman, Observation, PlannerRefused, PlanningContext, Replan

CASE_TOOL = "caseops_get_case_snapshot"
POLICY_TOOL = "caseops_get_policy_requirements"
DOCUMENTS_TOOL = "caseops_list_unclassified_documents"
RESOLVE_TOOL = "caseops_resolve_document_alias"
CHECK_TOOLS = frozenset({CASE_TOOL, POLICY_TOOL, DOCUMENTS_TOOL, RESOLVE_TOOL})
DRAFT_TOOL = "caseops_draft_document_request"
SEND_TOOL = "caseops_send_document_request"
REQUEST_REASON = "request the missing documents from the claimant"


class Outcome(StrEnum):
    DOCUMENTS_COMPLETE = "DOCUMENTS_COMPLETE"
    DOCUMENTS_COMPLETE_AFTER_NORMALIZATION = "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    MISSING_REQUIRED_DOCUMENTS = "MISSING_REQUIRED_DOCUMENTS"


class DocumentCheckResult(BaseModel):
    """The answer of a document check; every list is sorted."""

    outcome: Outcome
    received_document_codes: list[str]
    resolved_document_codes: list[str]
    missing_document_codes: list[str]
    unresolved_document_ids: list[str]
    evidence_refs: list[str]

    def citations(self) -> list[str]:
        """Every code, id and ref the answer states: each must come from a tool output of the run."""
        return [
            *self.received_document_codes,
            *self.resolved_document_codes,
            *self.missing_document_codes,
            *self.unresolved_document_ids,
            *self.evidence_refs,
        ]


def document_request_plan(case_id: str, missing: Sequence[str]) -> dict[str, Any]:
    """Draft a request for the ``missing`` documents, then send it (a person approves the send)."""
    return {
        "nodes": [
            {
                "id": "draft",
                "tool": DRAFT_TOOL,
                "args": {"case_id": case_id, "missing_document_codes": sorted(missing)},
            },
            {
                "id": "send",
                "tool": SEND_TOOL,
                "args": {"case_id": case_id, "draft_id": {"$ref": "draft", "pointer": "/draft_id"}},
            },
        ]
    }


def document_check_plan(case_id: str) -> dict[str, Any]:
    """Snapshot, policy and documents in parallel; then one alias resolution per unclassified document."""
    return {
        "nodes": [
            {"id": "case", "tool": CASE_TOOL, "args": {"case_id": case_id}},
            {"id": "policy", "tool": POLICY_TOOL, "args": {"case_id": case_id}},
            {"id": "docs", "tool": DOCUMENTS_TOOL, "args": {"case_id": case_id}},
            {
                "id": "resolve",
                "tool": RESOLVE_TOOL,
                "for_each": {"$ref": "docs", "pointer": "/documents"},
                "args": {"case_id": case_id, "document_id": {"$item": "/document_id"}},
            },
        ]
    }


class ConformancePlanner:
    name = "conformance"
    required_tools = CHECK_TOOLS
    """It checks a case's documents with these four tools: a run that cannot use them is refused."""

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        case_id = context.resource.get("case_id")
        if case_id is None:
            raise PlannerRefused(
                "the conformance planner checks a case's documents: the run names no case_id"
            )
        if context.replan_reason == REQUEST_REASON:
            verdict = decide_document_check(context.observations)
            if isinstance(verdict, Final):
                return document_request_plan(case_id, verdict.result["missing_document_codes"])
        return document_check_plan(case_id)

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        verdict = decide_document_check(observations)
        acts = any(tool.name == SEND_TOOL for tool in context.tools)
        if not acts or not isinstance(verdict, Final):
            return verdict
        if verdict.result["outcome"] != Outcome.MISSING_REQUIRED_DOCUMENTS:
            return verdict
        return decide_document_request(verdict, observations)


def decide_document_request(check: Final, observations: Sequence[Observation]) -> JoinDecision:
    """A run that may act, on a case missing documents: ask for them once, and answer with what was sent.

    Only a request that was sent (its operation succeeded) is an answer; one a person rejected, one that failed
    and one nobody could confirm each end the run for a person, saying which.
    """
    attempts = [observation for observation in observations if observation.tool in (DRAFT_TOOL, SEND_TOOL)]
    if not attempts:
        return Replan(REQUEST_REASON)
    sent = _single_output(observations, SEND_TOOL)
    if sent is not None and "request_id" not in sent:  # settled by a person: what was sent is not known here
        return NeedsHuman(
            StopReason.INSUFFICIENT_EVIDENCE,
            "the document request was resolved as sent by a person; there is no request of it to cite",
            result=dict(check.result),
        )
    if sent is not None:
        request = {"request_id": sent["request_id"], "evidence_ref": sent["evidence_ref"]}
        result = {**check.result, "document_request": request}
        return Final(result, citations=[*check.citations, sent["request_id"], sent["evidence_ref"]])
    failed = next((observation for observation in attempts if observation.error is not None), None)
    if failed is not None and failed.error is not None and failed.error.code == "OPERATION_REJECTED":
        return NeedsHuman(
            StopReason.OPERATION_REJECTED,
            f"the document request was not sent: {failed.node_id} was rejected",
            result=dict(check.result),
        )
    why = f"{failed.node_id} ({failed.error.code})" if failed is not None and failed.error else "no answer"
    return NeedsHuman(
        StopReason.OPERATION_FAILED, f"the document request was not sent: {why}", result=dict(check.result)
    )


def decide_document_check(observations: Sequence[Observation]) -> JoinDecision:
    """The document-check verdict, from whatever tool outputs the run observed (node ids do not matter).

    Every document the listing returned counts as unresolved unless an alias resolution of it succeeded,
    so a plan that skips resolutions cannot turn into a "missing documents" answer. A call that failed
    without an answer (a dead worker, a database outage) is no answer at all: "no alias rule resolves this
    label" is a resolution's ``resolved: false``, never a resolution that did not come back.
    """
    answered = {
        action_fingerprint(observation.tool, observation.args)
        for observation in observations
        if observation.status.has_output
    }
    unanswered = [
        observation
        for observation in observations
        if _unanswered(observation) and action_fingerprint(observation.tool, observation.args) not in answered
    ]
    if unanswered:
        named = ", ".join(
            f"{observation.node_id} ({observation.error.code if observation.error else observation.status})"
            for observation in unanswered[:20]
        )
        return NeedsHuman(
            StopReason.EVIDENCE_INCOMPLETE,
            f"{len(unanswered)} call(s) of the check have no answer, so no verdict can be given: {named}",
        )
    case = _single_output(observations, CASE_TOOL)
    policy = _single_output(observations, POLICY_TOOL)
    if case is None or policy is None:
        missing = [tool for tool, output in ((CASE_TOOL, case), (POLICY_TOOL, policy)) if output is None]
        return NeedsHuman(
            StopReason.INSUFFICIENT_EVIDENCE, f"no successful observation of {', '.join(missing)}"
        )

    received = set(case["received_document_codes"])
    required = {document["code"] for document in policy["required_documents"]}
    listing = _single_output(observations, DOCUMENTS_TOOL)
    if not required <= received and listing is None:
        # Without the document listing, "missing" could be wrong: a document may sit unclassified.
        return NeedsHuman(
            StopReason.INSUFFICIENT_EVIDENCE,
            f"required documents are not all received and no successful observation of {DOCUMENTS_TOOL}",
        )
    candidates = {document["document_id"] for document in listing["documents"]} if listing else set()
    resolved: set[str] = set()
    resolved_ids: set[str] = set()
    evidence = {case["evidence_ref"], policy["evidence_ref"]}
    for observation in observations:
        if observation.tool != RESOLVE_TOOL:
            continue
        document_id = str(observation.args.get("document_id"))
        candidates.add(document_id)
        output = observation.output
        if observation.status.has_output and output["resolved"]:
            resolved.add(output["canonical_code"])
            resolved_ids.add(document_id)
            evidence.add(output["source_ref"])
    unresolved = candidates - resolved_ids

    still_missing = required - received - resolved
    if required <= received:
        outcome = Outcome.DOCUMENTS_COMPLETE
    elif not still_missing:
        outcome = Outcome.DOCUMENTS_COMPLETE_AFTER_NORMALIZATION
    else:
        outcome = Outcome.MISSING_REQUIRED_DOCUMENTS
    answer = DocumentCheckResult(
        outcome=outcome,
        received_document_codes=sorted(received),
        resolved_document_codes=sorted(resolved),
        missing_document_codes=sorted(still_missing),
        unresolved_document_ids=sorted(unresolved),
        evidence_refs=sorted(evidence),
    )
    result = answer.model_dump(mode="json")
    if still_missing and unresolved:
        return NeedsHuman(
            StopReason.UNRESOLVED_SOURCE_DOCUMENTS,
            f"required documents {sorted(still_missing)} are missing and {len(unresolved)} source document(s) "
            "could not be classified",
            result=result,
        )
    return Final(result, citations=answer.citations())


def _unanswered(observation: Observation) -> bool:
    """A call of the check whose answer was never learned: still out, or failed for an infrastructure reason."""
    if observation.tool not in CHECK_TOOLS:
        return False
    if observation.status in (NodeStatus.RUNNING, NodeStatus.RETRYING):
        return True
    error = observation.error
    return observation.status is NodeStatus.FAILED and error is not None and error.infrastructure


def _single_output(observations: Sequence[Observation], tool: str) -> Any:
    for observation in observations:
        if observation.tool == tool and observation.status.has_output:
            return observation.output
    return None

"""The conformance planner's verdict, computed from observations alone, and the plan it proposes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dag.errors import PlanInvalid
from dag.events import ErrorKind, NodeError
from dag.plan import Plan
from dag.states import NodeStatus, StopReason
from dag.validate import validate_plan
from mcp_server.contracts import CASEOPS_TOOLS, IDENTIFIER_PATTERN
from mcp_server.planner import (
    CASE_TOOL,
    CHECK_TOOLS,
    DOCUMENTS_TOOL,
    DRAFT_TOOL,
    POLICY_TOOL,
    REQUEST_REASON,
    RESOLVE_TOOL,
    SEND_TOOL,
    ConformancePlanner,
    Outcome,
    decide_document_check,
    document_check_plan,
)
from planner import Final, NeedsHuman, Observation, PlanningContext, Replan
from planner.base import ToolSpec

CASE_REF = "case://C-102@7"
POLICY_REF = "policy://motor-claim-standard@2026.1"
REQUIRED = ["LOSS_STATEMENT", "IDENTITY_DOCUMENT", "ACCIDENT_CERTIFICATE"]


def case(received: list[str], node_id: str = "case") -> Observation:
    output = {"case_id": "C-102", "received_document_codes": received, "evidence_ref": CASE_REF}
    return Observation(node_id, CASE_TOOL, {"case_id": "C-102"}, NodeStatus.SUCCEEDED, output)


def policy(required: list[str] = REQUIRED, node_id: str = "policy") -> Observation:
    output = {
        "case_id": "C-102",
        "required_documents": [{"code": code, "label": code.title()} for code in required],
        "evidence_ref": POLICY_REF,
    }
    return Observation(node_id, POLICY_TOOL, {"case_id": "C-102"}, NodeStatus.SUCCEEDED, output)


def docs(document_ids: list[str], node_id: str = "docs") -> Observation:
    output = {"case_id": "C-102", "documents": [{"document_id": d} for d in document_ids]}
    return Observation(node_id, DOCUMENTS_TOOL, {"case_id": "C-102"}, NodeStatus.SUCCEEDED, output)


def resolved(document_id: str, code: str, node_id: str = "resolve[0]") -> Observation:
    output = {
        "case_id": "C-102",
        "document_id": document_id,
        "resolved": True,
        "canonical_code": code,
        "source_ref": f"evidence://C-102/{document_id}@1",
    }
    args = {"case_id": "C-102", "document_id": document_id}
    return Observation(node_id, RESOLVE_TOOL, args, NodeStatus.SUCCEEDED, output)


def unresolved(document_id: str, node_id: str = "resolve[1]") -> Observation:
    output = {
        "case_id": "C-102",
        "document_id": document_id,
        "resolved": False,
        "canonical_code": None,
        "source_ref": f"evidence://C-102/{document_id}@1",
    }
    args = {"case_id": "C-102", "document_id": document_id}
    return Observation(node_id, RESOLVE_TOOL, args, NodeStatus.SUCCEEDED, output)


def failed(tool: str, node_id: str, args: dict[str, Any]) -> Observation:
    """A call that failed without an answer (here, a timeout)."""
    error = NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message="no answer within 10s")
    return Observation(node_id, tool, args, NodeStatus.FAILED, None, error)


def refused(tool: str, node_id: str, args: dict[str, Any], code: str = "DOCUMENT_NOT_FOUND") -> Observation:
    """A call the tool answered with "no"."""
    error = NodeError(kind=ErrorKind.BUSINESS, code=code, message="not found")
    return Observation(node_id, tool, args, NodeStatus.FAILED, None, error)


def result_of(decision: object) -> dict[str, Any]:
    assert isinstance(decision, Final), decision
    return dict(decision.result)


def test_all_required_documents_received_is_documents_complete() -> None:
    decision = decide_document_check(
        [case(["LOSS_STATEMENT", "IDENTITY_DOCUMENT", "ACCIDENT_CERTIFICATE"]), policy(), docs([])]
    )
    assert result_of(decision) == {
        "outcome": "DOCUMENTS_COMPLETE",
        "received_document_codes": ["ACCIDENT_CERTIFICATE", "IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
        "resolved_document_codes": [],
        "missing_document_codes": [],
        "unresolved_document_ids": [],
        "evidence_refs": [CASE_REF, POLICY_REF],
    }


def test_complete_needs_no_document_listing() -> None:
    decision = decide_document_check([case(REQUIRED), policy()])
    assert result_of(decision)["outcome"] == Outcome.DOCUMENTS_COMPLETE


def test_a_missing_document_found_by_alias_resolution_is_complete_after_normalization() -> None:
    decision = decide_document_check(
        [
            case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C102-003"]),
            resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE"),
        ]
    )
    assert result_of(decision) == {
        "outcome": "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
        "received_document_codes": ["IDENTITY_DOCUMENT", "LOSS_STATEMENT"],
        "resolved_document_codes": ["ACCIDENT_CERTIFICATE"],
        "missing_document_codes": [],
        "unresolved_document_ids": [],
        "evidence_refs": [CASE_REF, "evidence://C-102/DOC-C102-003@1", POLICY_REF],
    }


def test_a_document_neither_received_nor_resolved_is_missing() -> None:
    decision = decide_document_check(
        [
            case(["LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C104-001"]),
            resolved("DOC-C104-001", "ACCIDENT_CERTIFICATE"),
        ]
    )
    result = result_of(decision)
    assert result["outcome"] == "MISSING_REQUIRED_DOCUMENTS"
    assert result["missing_document_codes"] == ["IDENTITY_DOCUMENT"]
    assert result["resolved_document_codes"] == ["ACCIDENT_CERTIFICATE"]
    assert result["unresolved_document_ids"] == []


def test_missing_documents_with_an_unresolved_source_document_need_a_human_and_keep_the_result() -> None:
    decision = decide_document_check(
        [
            case(["LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C104-001", "DOC-C104-006"]),
            resolved("DOC-C104-001", "ACCIDENT_CERTIFICATE"),
            unresolved("DOC-C104-006"),
        ]
    )
    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.UNRESOLVED_SOURCE_DOCUMENTS
    assert "IDENTITY_DOCUMENT" in decision.detail
    assert decision.result == {
        "outcome": "MISSING_REQUIRED_DOCUMENTS",
        "received_document_codes": ["LOSS_STATEMENT"],
        "resolved_document_codes": ["ACCIDENT_CERTIFICATE"],
        "missing_document_codes": ["IDENTITY_DOCUMENT"],
        "unresolved_document_ids": ["DOC-C104-006"],
        "evidence_refs": [CASE_REF, "evidence://C-102/DOC-C104-001@1", POLICY_REF],
    }


def test_a_resolution_the_tool_refused_counts_as_unresolved() -> None:
    args = {"case_id": "C-102", "document_id": "DOC-C102-003"}
    decision = decide_document_check(
        [
            case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C102-003"]),
            refused(RESOLVE_TOOL, "resolve[0]", args),
        ]
    )
    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.UNRESOLVED_SOURCE_DOCUMENTS
    assert decision.result is not None
    assert decision.result["unresolved_document_ids"] == ["DOC-C102-003"]
    assert decision.result["missing_document_codes"] == ["ACCIDENT_CERTIFICATE"]


@pytest.mark.parametrize(
    "unanswered",
    [
        failed(RESOLVE_TOOL, "resolve[0]", {"case_id": "C-102", "document_id": "DOC-C102-003"}),
        Observation(
            "resolve[0]",
            RESOLVE_TOOL,
            {"case_id": "C-102", "document_id": "DOC-C102-003"},
            NodeStatus.RETRYING,
        ),
    ],
    ids=["failed-without-an-answer", "still-retrying"],
)
def test_a_resolution_without_an_answer_is_no_verdict_not_an_unresolved_document(
    unanswered: Observation,
) -> None:
    decision = decide_document_check(
        [case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]), policy(), docs(["DOC-C102-003"]), unanswered]
    )
    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.EVIDENCE_INCOMPLETE
    assert "resolve[0]" in decision.detail
    assert decision.result is None  # no "ACCIDENT_CERTIFICATE is missing": nobody knows that


def test_a_failed_call_answered_by_an_identical_one_is_not_missing() -> None:
    args = {"case_id": "C-102", "document_id": "DOC-C102-003"}
    decision = decide_document_check(
        [
            case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C102-003"]),
            failed(RESOLVE_TOOL, "resolve[0]", args),
            resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE"),
        ]
    )
    assert result_of(decision)["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"


@pytest.mark.parametrize("tool", [CASE_TOOL, POLICY_TOOL, DOCUMENTS_TOOL])
def test_a_first_layer_call_without_an_answer_is_no_verdict(tool: str) -> None:
    observations = [case(["LOSS_STATEMENT"]), policy(), docs(["DOC-C102-003"])]
    observations = [
        failed(tool, "x", {"case_id": "C-102"}) if observation.tool == tool else observation
        for observation in observations
    ]
    decision = decide_document_check(observations)
    assert isinstance(decision, NeedsHuman)
    assert (decision.stop_reason, decision.result) == (StopReason.EVIDENCE_INCOMPLETE, None)
    assert "x (TIMEOUT)" in decision.detail


def test_an_unresolved_document_does_not_matter_when_nothing_is_missing() -> None:
    decision = decide_document_check(
        [
            case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C102-003", "DOC-C102-009"]),
            resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE"),
            unresolved("DOC-C102-009"),
        ]
    )
    result = result_of(decision)
    assert result["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert result["unresolved_document_ids"] == ["DOC-C102-009"]


@pytest.mark.parametrize(
    ("observations", "named"),
    [
        ([policy(), docs([])], CASE_TOOL),
        ([case(REQUIRED), docs([])], POLICY_TOOL),
        ([docs([])], f"{CASE_TOOL}, {POLICY_TOOL}"),
        ([refused(CASE_TOOL, "case", {"case_id": "C-102"}, "CASE_NOT_FOUND"), policy()], CASE_TOOL),
        (
            [case(REQUIRED), refused(POLICY_TOOL, "policy", {"case_id": "C-102"}, "POLICY_NOT_FOUND")],
            POLICY_TOOL,
        ),
    ],
    ids=["no-case", "no-policy", "neither", "case-failed", "policy-failed"],
)
def test_without_a_case_or_policy_output_the_evidence_is_insufficient(
    observations: list[Observation], named: str
) -> None:
    decision = decide_document_check(observations)
    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.INSUFFICIENT_EVIDENCE
    assert decision.detail == f"no successful observation of {named}"
    assert decision.result is None


def test_missing_documents_without_the_document_listing_are_insufficient_evidence() -> None:
    listing_failed = refused(DOCUMENTS_TOOL, "docs", {"case_id": "C-102"}, "CASE_NOT_FOUND")
    for observations in (
        [case(["LOSS_STATEMENT"]), policy()],
        [case(["LOSS_STATEMENT"]), policy(), listing_failed],
    ):
        decision = decide_document_check(observations)
        assert isinstance(decision, NeedsHuman)
        assert decision.stop_reason is StopReason.INSUFFICIENT_EVIDENCE
        assert DOCUMENTS_TOOL in decision.detail
        assert decision.result is None


def test_a_reused_observation_counts_as_an_output() -> None:
    reused_case = Observation(
        "case-again", CASE_TOOL, {"case_id": "C-102"}, NodeStatus.REUSED, case(REQUIRED).output
    )
    decision = decide_document_check([reused_case, policy()])
    assert result_of(decision)["outcome"] == "DOCUMENTS_COMPLETE"


def test_every_list_in_the_result_is_sorted() -> None:
    decision = decide_document_check(
        [
            case(["LOSS_STATEMENT", "ACCIDENT_CERTIFICATE"]),
            policy(
                ["LOSS_STATEMENT", "ACCIDENT_CERTIFICATE", "POLICE_REPORT", "IDENTITY_DOCUMENT", "INVOICE"]
            ),
            docs(["DOC-9", "DOC-1", "DOC-5", "DOC-3"]),
            resolved("DOC-9", "POLICE_REPORT", node_id="r9"),
            unresolved("DOC-5", node_id="r5"),
            resolved("DOC-1", "IDENTITY_DOCUMENT", node_id="r1"),
            unresolved("DOC-3", node_id="r3"),
        ]
    )
    assert isinstance(decision, NeedsHuman)
    assert decision.result == {
        "outcome": "MISSING_REQUIRED_DOCUMENTS",
        "received_document_codes": ["ACCIDENT_CERTIFICATE", "LOSS_STATEMENT"],
        "resolved_document_codes": ["IDENTITY_DOCUMENT", "POLICE_REPORT"],
        "missing_document_codes": ["INVOICE"],
        "unresolved_document_ids": ["DOC-3", "DOC-5"],
        "evidence_refs": [CASE_REF, "evidence://C-102/DOC-1@1", "evidence://C-102/DOC-9@1", POLICY_REF],
    }


def test_node_ids_do_not_matter_observations_are_found_by_tool() -> None:
    usual = [
        case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
        policy(),
        docs(["DOC-C102-003"]),
        resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE"),
    ]
    renamed_and_shuffled = [
        resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE", node_id="zz-alias"),
        docs(["DOC-C102-003"], node_id="listing"),
        policy(node_id="rules"),
        case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"], node_id="snapshot"),
    ]
    assert decide_document_check(renamed_and_shuffled) == decide_document_check(usual)
    assert result_of(decide_document_check(usual))["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"


def test_the_verdict_needs_only_the_children_of_a_for_each_not_its_group() -> None:
    # The runner shows the joiner no group nodes: resolutions arrive as the children resolve[0], resolve[1].
    observations = [
        case(["LOSS_STATEMENT"]),
        policy(),
        docs(["DOC-A", "DOC-B"]),
        resolved("DOC-A", "ACCIDENT_CERTIFICATE", node_id="resolve[0]"),
        resolved("DOC-B", "IDENTITY_DOCUMENT", node_id="resolve[1]"),
    ]
    assert all(observation.node_id != "resolve" for observation in observations)
    result = result_of(decide_document_check(observations))
    assert result["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert result["resolved_document_codes"] == ["ACCIDENT_CERTIFICATE", "IDENTITY_DOCUMENT"]


async def test_the_conformance_planner_proposes_the_document_check_and_decides_with_it() -> None:
    context = PlanningContext(resource={"case_id": "C-104"}, goal="check documents", tools=[])
    planner = ConformancePlanner()
    assert await planner.propose(context) == document_check_plan("C-104")
    observations = [case(["LOSS_STATEMENT"]), policy()]
    assert await planner.decide(context, observations) == decide_document_check(observations)


def test_the_document_check_plan_fans_out_over_the_listed_documents() -> None:
    plan = validate_plan(Plan.parse(document_check_plan("C-102")), CASEOPS_TOOLS, max_nodes=4)
    assert [node.id for node in plan.nodes] == ["case", "policy", "docs", "resolve"]
    resolve = plan.node("resolve")
    assert resolve.for_each is not None
    assert (resolve.for_each.ref, resolve.for_each.pointer) == ("docs", "/documents")
    assert all(node.args["case_id"] == "C-102" for node in plan.nodes)


@settings(max_examples=60, database=None, deadline=None)
@given(st.from_regex(IDENTIFIER_PATTERN, fullmatch=True))
def test_the_document_check_plan_validates_for_any_valid_case_id(case_id: str) -> None:
    plan = validate_plan(Plan.parse(document_check_plan(case_id)), CASEOPS_TOOLS, max_nodes=64)
    assert {node.args["case_id"] for node in plan.nodes} == {case_id}


def test_the_document_check_plan_is_refused_for_an_invalid_case_id() -> None:
    with pytest.raises(PlanInvalid) as raised:
        validate_plan(Plan.parse(document_check_plan("C 102")), CASEOPS_TOOLS, max_nodes=64)
    assert raised.value.code == "INVALID_ARGUMENTS"


def test_a_listed_document_no_resolution_was_attempted_for_counts_as_unresolved() -> None:
    # A plan that skips the resolutions cannot turn the listing into a "missing documents" answer.
    decision = decide_document_check([case(["LOSS_STATEMENT"]), policy(), docs(["DOC-A", "DOC-B"])])

    assert isinstance(decision, NeedsHuman)
    assert decision.stop_reason is StopReason.UNRESOLVED_SOURCE_DOCUMENTS
    assert decision.result is not None
    assert decision.result["unresolved_document_ids"] == ["DOC-A", "DOC-B"]


def test_only_the_listed_documents_a_resolution_succeeded_for_leave_the_unresolved_list() -> None:
    decision = decide_document_check(
        [
            case(["LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-A", "DOC-B"]),
            resolved("DOC-A", "ACCIDENT_CERTIFICATE"),
        ]
    )

    assert isinstance(decision, NeedsHuman)
    assert decision.result is not None
    assert decision.result["unresolved_document_ids"] == ["DOC-B"]
    assert decision.result["missing_document_codes"] == ["IDENTITY_DOCUMENT"]


def test_a_final_answer_cites_every_code_id_and_ref_it_states() -> None:
    decision = decide_document_check(
        [
            case(["IDENTITY_DOCUMENT", "LOSS_STATEMENT"]),
            policy(),
            docs(["DOC-C102-003", "DOC-C102-009"]),
            resolved("DOC-C102-003", "ACCIDENT_CERTIFICATE"),
            unresolved("DOC-C102-009"),
        ]
    )

    assert isinstance(decision, Final)
    assert sorted(decision.citations) == sorted(
        [
            "IDENTITY_DOCUMENT",
            "LOSS_STATEMENT",
            "ACCIDENT_CERTIFICATE",
            "DOC-C102-009",
            CASE_REF,
            POLICY_REF,
            "evidence://C-102/DOC-C102-003@1",
        ]
    )


def test_a_complete_case_without_listing_cites_its_received_codes_and_both_refs() -> None:
    decision = decide_document_check([case(REQUIRED), policy()])

    assert isinstance(decision, Final)
    assert sorted(decision.citations) == sorted([*REQUIRED, CASE_REF, POLICY_REF])


# ---- acting: a request for the missing documents, in a run of stage "act"


def acting_context(*names: str) -> PlanningContext:
    tools = [ToolSpec(name, name, {"type": "object"}) for name in names]
    return PlanningContext(resource={"case_id": "C-103"}, goal="g", tools=tools)


MISSING = [case(["LOSS_STATEMENT", "IDENTITY_DOCUMENT"]), policy(), docs([])]
SENT = {"request_id": "REQ-1", "evidence_ref": "request://C-103/REQ-1"}


def write(tool: str, status: NodeStatus, output: Any = None, error: NodeError | None = None) -> Observation:
    return Observation(tool.removeprefix("caseops_"), tool, {"case_id": "C-103"}, status, output, error)


async def test_a_run_that_may_act_asks_for_the_missing_documents_once_and_answers_with_the_request() -> None:
    planner = ConformancePlanner()
    acting = acting_context(*CHECK_TOOLS, DRAFT_TOOL, SEND_TOOL)

    first = await planner.decide(acting, MISSING)
    assert first == Replan(REQUEST_REASON)
    done = await planner.decide(acting, [*MISSING, write(SEND_TOOL, NodeStatus.SUCCEEDED, SENT)])
    assert isinstance(done, Final)
    assert done.result["document_request"] == SENT
    assert "REQ-1" in done.citations


async def test_a_run_that_may_not_act_answers_as_it_always_did() -> None:
    verdict = await ConformancePlanner().decide(acting_context(*CHECK_TOOLS), MISSING)

    assert isinstance(verdict, Final)
    assert verdict.result["outcome"] == Outcome.MISSING_REQUIRED_DOCUMENTS


@pytest.mark.parametrize(
    ("send", "reason"),
    [
        (
            write(
                SEND_TOOL,
                NodeStatus.FAILED,
                error=NodeError(kind=ErrorKind.AUTHORIZATION, code="OPERATION_REJECTED", message="m"),
            ),
            StopReason.OPERATION_REJECTED,
        ),
        (
            write(
                SEND_TOOL,
                NodeStatus.FAILED,
                error=NodeError(kind=ErrorKind.BUSINESS, code="WRITE_NOT_DONE", message="m"),
            ),
            StopReason.OPERATION_FAILED,
        ),
        (
            write(SEND_TOOL, NodeStatus.SUCCEEDED, {"resolved_by": "person:t/p", "note": "n"}),
            StopReason.INSUFFICIENT_EVIDENCE,
        ),
    ],
)
async def test_a_request_not_sent_or_not_citable_ends_the_run_for_a_person(
    send: Observation, reason: StopReason
) -> None:
    acting = acting_context(*CHECK_TOOLS, DRAFT_TOOL, SEND_TOOL)

    verdict = await ConformancePlanner().decide(acting, [*MISSING, send])

    assert isinstance(verdict, NeedsHuman)
    assert verdict.stop_reason is reason
    assert verdict.result is not None
    assert verdict.result["missing_document_codes"] == ["ACCIDENT_CERTIFICATE"]

"""The pure parts of caseops' tasks: the ``ttl`` granted, a task row as either form's wire ``Task``, and the
evidence bundle's digest."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from mcp_server.contracts import EvidenceBundle, ExportedDocument
from mcp_server.export import bundle_digest
from mcp_server.task_requests import declares_extension
from mcp_server.task_store import MAX_TTL_MS, extension_task_json, granted_ttl, task_json


def row(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "task_id": "task-1",
        "status": "working",
        "status_message": None,
        "created_at": datetime(2026, 12, 7, 10, 0, tzinfo=UTC),
        "updated_at": datetime(2026, 12, 7, 10, 0, 1, tzinfo=UTC),
        "ttl_ms": 60000,
        "poll_interval_ms": 500,
        "result": None,
        "is_error": False,
    }
    return {**base, **changes}


def test_the_ttl_granted_is_what_was_asked_within_a_millisecond_and_a_day() -> None:
    assert granted_ttl(60000) == 60000
    assert granted_ttl(0) == 1
    assert granted_ttl(-5) == 1
    assert granted_ttl(MAX_TTL_MS + 1) == MAX_TTL_MS
    for asked in (None, True, 1.5, "60000"):
        assert granted_ttl(asked) == MAX_TTL_MS


def test_a_row_is_the_2025_11_25_task_with_a_status_message_only_when_there_is_one() -> None:
    assert task_json(row()) == {
        "taskId": "task-1",
        "status": "working",
        "createdAt": "2026-12-07T10:00:00Z",
        "lastUpdatedAt": "2026-12-07T10:00:01Z",
        "ttl": 60000,
        "pollInterval": 500,
    }
    assert (
        task_json(row(status_message="copying document 1 of 3"))["statusMessage"] == "copying document 1 of 3"
    )


def test_a_row_is_the_extensions_task_in_milliseconds_its_result_inlined_once_ended() -> None:
    working = extension_task_json(row(), with_result=True)
    assert (working["ttlMs"], working["pollIntervalMs"]) == (60000, 500)
    assert {"ttl", "pollInterval", "result"}.isdisjoint(working)
    done = extension_task_json(row(status="completed", result=json.dumps({"a": 1})), with_result=True)
    assert done["result"]["structuredContent"] == {"a": 1}
    assert done["result"]["isError"] is False
    assert "result" not in extension_task_json(row(status="completed", result=json.dumps({"a": 1})))


def test_a_tool_error_is_a_completed_task_with_an_error_result_under_the_extension() -> None:
    failed = row(status="failed", result=json.dumps({"error": {"code": "TASK_FAILED"}}), is_error=True)
    task = extension_task_json(failed, with_result=True)
    assert (task["status"], task["result"]["isError"]) == ("completed", True)
    assert task_json(failed)["status"] == "failed"  # the 2025-11-25 form keeps its own status


def test_only_a_request_declaring_the_extension_in_its_client_capabilities_gets_a_task() -> None:
    key = "io.modelcontextprotocol/clientCapabilities"
    assert declares_extension({"_meta": {key: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}})
    assert not declares_extension({"_meta": {key: {"extensions": {}}}})
    assert not declares_extension({"_meta": {key: {}}})
    assert not declares_extension({"task": {"ttl": 1}})


def bundle(**changes: Any) -> EvidenceBundle:
    document = ExportedDocument(
        document_id="DOC-1", source_label="ID card", canonical_code="ID", source_ref="evidence://C-1/DOC-1@1"
    )
    fields: dict[str, Any] = {
        "export_id": "task-1",
        "case_id": "C-1",
        "case_version": 3,
        "policy_id": "P-1",
        "policy_version": "2",
        "documents": [document],
        "evidence_refs": ["evidence://C-1/DOC-1@1"],
        "digest": "",
    }
    return EvidenceBundle(**{**fields, **changes})


def test_the_digest_is_of_the_content_alone_not_of_its_export_id_or_digest() -> None:
    digest = bundle_digest(bundle())
    assert set(digest) <= set("0123456789abcdef")
    assert len(digest) == 64
    assert bundle_digest(bundle(export_id="task-2", digest="x")) == digest
    assert bundle_digest(bundle(case_version=4)) != digest
    assert bundle_digest(bundle(documents=[])) != digest

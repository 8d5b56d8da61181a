"""The 2026-07-28 Tasks extension's wire shapes, as the client builds and reads them (``task_extension``)."""

from __future__ import annotations

from actors.calls.mcp import task_extension as ext

FORM = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "Which case?", "requestedSchema": {"type": "object"}},
}


def test_the_envelope_declares_the_extension_and_keeps_the_calls_own_meta() -> None:
    params = ext.with_envelope({"name": "t", "_meta": {"raydag/operation": "op-1"}})
    meta = params["_meta"]
    assert meta["io.modelcontextprotocol/clientCapabilities"]["extensions"] == {ext.EXTENSION: {}}
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    assert meta["raydag/operation"] == "op-1"
    assert params["name"] == "t"


def test_a_tasks_request_is_routed_by_its_task_id_and_a_call_by_its_tool() -> None:
    assert ext.routing_headers("tasks/get", {"taskId": "task-1"})["mcp-name"] == "task-1"
    assert ext.routing_headers("tools/call", {"name": "export"})["mcp-name"] == "export"
    assert ext.routing_headers("server/discover", {})["mcp-method"] == "server/discover"
    assert "mcp-name" not in ext.routing_headers("server/discover", {})


def test_the_extension_is_offered_only_when_discover_lists_it_under_extensions() -> None:
    assert ext.offers_tasks({"capabilities": {"extensions": {ext.EXTENSION: {}}}})
    assert not ext.offers_tasks({"capabilities": {"tasks": {"requests": {"tools": {"call": {}}}}}})
    assert not ext.offers_tasks({"capabilities": {"extensions": {ext.EXTENSION: True}}})
    assert not ext.offers_tasks({})


def test_only_a_result_typed_task_is_a_created_task() -> None:
    assert ext.created_task({"resultType": "task", "taskId": "t"}) == {"resultType": "task", "taskId": "t"}
    assert ext.created_task({"resultType": "complete", "content": []}) is None
    assert ext.created_task({"content": []}) is None


def test_task_fields_take_the_extensions_millisecond_names() -> None:
    fields = ext.task_fields({"status": "working", "statusMessage": "s", "pollIntervalMs": 250, "ttlMs": 9})
    assert fields == {"status": "working", "statusMessage": "s", "pollInterval": 250}


def test_tasks_get_carries_the_result_the_error_or_the_questions_by_status() -> None:
    result = {"content": [], "isError": True}
    assert ext.reported({"status": "completed", "result": result}).result == result
    failed = ext.reported({"status": "failed", "error": {"code": -32603, "message": "m"}})
    assert failed.error == {"code": -32603, "message": "m"}
    assert ext.reported({"status": "failed"}).error is not None  # an error it did not give is still one
    asked = ext.reported({"status": "input_required", "inputRequests": {"k": FORM, "bad": 3}})
    assert asked.questions == {"k": FORM}
    assert ext.reported({"status": "working", "result": result}) == ext.Reported()


def test_the_first_unanswered_question_is_put_in_the_request_shape_with_its_key_as_id() -> None:
    questions = {"b": FORM, "a": {"method": "sampling/createMessage", "params": {}}}
    assert ext.first_question(questions) == (
        "a",
        {"id": "a", "method": "sampling/createMessage", "params": {}},
    )
    key, request = ext.first_question(questions, frozenset({"a"})) or ("", {})
    assert (key, request["method"], request["id"]) == ("b", "elicitation/create", "b")
    assert ext.first_question(questions, frozenset({"a", "b"})) is None


def test_an_answer_goes_back_keyed_by_its_question() -> None:
    assert ext.update_params("task-1", "k", {"action": "accept", "content": {"x": 1}}) == {
        "taskId": "task-1",
        "inputResponses": {"k": {"action": "accept", "content": {"x": 1}}},
    }

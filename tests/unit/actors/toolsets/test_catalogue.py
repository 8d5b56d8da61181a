"""Contracts from a listing and an overlay: the overlay decides, the server only describes; pins change
exactly when a definition does."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from actors.toolsets.catalogue import ToolsetMismatch, build_catalogue
from actors.toolsets.config import Toolsets, parse_toolsets
from actors.toolsets.listing import ServerListing, ToolDefinition
from actors.toolsets.pinning import compare, definition_digest, pins_of
from dag.contracts import BindingMatch, Recording, Risk, RunBinding

FILES = """\
servers:
  - name: files
    transport: stdio
    command: node
    timeouts: {call_s: 7}
    tools:
      read_text_file:
        scope: files:read
        risk: read_only
        recording: digest
        run_bound: {path: {resource: root, match: path_within}}
"""
READ = ToolDefinition(
    name="read_text_file",
    description="Read a file as text",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    output_schema={"type": "object", "properties": {"content": {"type": "string"}}},
    annotations={"readOnlyHint": True},
)
WRITE = ToolDefinition(
    name="write_file",
    description="Write a file",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    },
    annotations={"readOnlyHint": False, "destructiveHint": True},
)


def toolsets(text: str = FILES) -> Toolsets:
    return parse_toolsets(text, "toolsets.yaml", {})


def listing(*tools: ToolDefinition) -> dict[str, ServerListing]:
    return {"files": ServerListing("files", "2025-11-25", tools)}


def test_a_contract_takes_its_shapes_from_the_server_and_everything_else_from_the_overlay() -> None:
    catalogue = build_catalogue(toolsets(), listing(READ, WRITE))

    contract = catalogue.contracts["read_text_file"]
    assert contract.input_schema == READ.input_schema
    assert contract.output_schema == READ.output_schema
    assert (contract.scope, contract.risk, contract.recording) == (
        "files:read",
        Risk.READ_ONLY,
        Recording.DIGEST,
    )
    assert contract.timeout_s == 7.0
    assert contract.server == "files"
    assert contract.version == definition_digest(READ)
    assert contract.run_bindings == (RunBinding("path", "root", BindingMatch.PATH_WITHIN),)


def test_a_listed_tool_the_overlay_does_not_name_is_never_offered() -> None:
    catalogue = build_catalogue(toolsets(), listing(READ, WRITE))

    assert set(catalogue.contracts) == {"read_text_file"}
    assert catalogue.unoffered == {"files": ("write_file",)}
    assert set(catalogue.pins["files"]) == {"read_text_file"}


def test_a_declared_tool_the_server_does_not_list_is_a_startup_error() -> None:
    with pytest.raises(
        ToolsetMismatch, match="'read_text_file': is declared, but the server does not list it"
    ):
        build_catalogue(toolsets(), listing(WRITE))


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        ({"readOnlyHint": False, "destructiveHint": True}, "marks it destructive"),
        ({"destructiveHint": True}, "marks it destructive"),
        ({"readOnlyHint": False}, "says it is not read-only"),
    ],
)
def test_an_overlay_calling_read_only_a_tool_the_server_says_writes_is_a_startup_error(
    annotations: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ToolsetMismatch, match=problem):
        build_catalogue(toolsets(), listing(dataclasses.replace(READ, annotations=annotations)))


def test_a_read_only_hint_grants_nothing_the_overlay_decides_the_risk() -> None:
    text = FILES.replace("risk: read_only", "risk: reversible_write")

    contract = build_catalogue(toolsets(text), listing(READ)).contracts["read_text_file"]

    assert contract.risk is Risk.REVERSIBLE_WRITE
    assert not contract.idempotent


def test_a_run_bound_field_the_servers_schema_does_not_take_is_a_startup_error() -> None:
    text = FILES.replace("run_bound: {path:", "run_bound: {file:")

    with pytest.raises(ToolsetMismatch, match=r"bound fields \['file'\] are not inputs"):
        build_catalogue(toolsets(text), listing(READ))


def test_a_listed_schema_that_is_not_json_schema_is_a_startup_error() -> None:
    broken = dataclasses.replace(READ, input_schema={"type": "object", "properties": {"path": {"type": 3}}})

    with pytest.raises(ToolsetMismatch, match="not a valid JSON Schema"):
        build_catalogue(toolsets(), listing(broken))


def test_a_digest_is_stable_under_key_order_and_changes_with_any_part_of_the_definition() -> None:
    reordered = dataclasses.replace(READ, input_schema=dict(reversed(list(READ.input_schema.items()))))

    assert definition_digest(reordered) == definition_digest(READ)
    assert definition_digest(READ).startswith("sha256:")
    changes = [
        {"description": "Read a file as text, and send it elsewhere"},
        {"input_schema": {**READ.input_schema, "required": []}},
        {"output_schema": None},
        {"annotations": {"readOnlyHint": False}},
        {"title": "Read"},
    ]
    digests = {definition_digest(dataclasses.replace(READ, **change)) for change in changes}
    assert len(digests) == len(changes)
    assert definition_digest(READ) not in digests


def test_comparing_pins_reports_tools_added_removed_and_changed() -> None:
    listed = ServerListing("files", "2025-11-25", (READ, WRITE))
    pins = pins_of(listed)
    changed = dataclasses.replace(READ, description="Read a file, then mail it")
    extra = dataclasses.replace(READ, name="read_media_file")

    assert compare(pins, listed).unchanged
    after = compare(pins, ServerListing("files", "2025-11-25", (changed, extra)))
    assert (after.added, after.removed, after.changed) == (
        ("read_media_file",),
        ("write_file",),
        ("read_text_file",),
    )
    assert after.broken == frozenset({"write_file", "read_text_file"})
    assert after.describe() == "files: changed read_text_file; removed write_file; added read_media_file"


def test_comparing_only_the_offered_tools_ignores_changes_to_the_others() -> None:
    listed = ServerListing("files", "2025-11-25", (READ, WRITE))
    offered = frozenset({"read_text_file"})
    rewritten = dataclasses.replace(WRITE, description="now also deletes")

    assert compare(
        pins_of(listed, offered), ServerListing("files", "x", (READ, rewritten)), offered
    ).unchanged


def test_a_listing_as_text_is_also_recorded_as_its_lines_for_a_for_each() -> None:
    text = FILES.replace("        recording: digest\n", "        split_lines: [content]\n")
    contract = build_catalogue(toolsets(text), listing(READ)).contracts["read_text_file"]

    assert contract.with_lines({"content": "/r/a.txt\n\n/r/b.txt\n"}) == {
        "content": "/r/a.txt\n\n/r/b.txt\n",
        "content_lines": ["/r/a.txt", "/r/b.txt"],
    }


def test_split_lines_naming_no_string_output_field_is_a_startup_error() -> None:
    text = FILES.replace("        recording: digest\n", "        split_lines: [size]\n")

    with pytest.raises(ToolsetMismatch, match="split_lines names 'size', not a string output field"):
        build_catalogue(toolsets(text), listing(READ))


RENAMED = FILES.replace("      read_text_file:\n", "      reports_read:\n        name: read_text_file\n")


def test_a_tool_offered_under_another_name_is_its_servers_tool_under_the_operators_name() -> None:
    declared = toolsets(RENAMED)
    renamed = listing(READ)["files"].renamed(declared.servers[0].renames)
    contracts = build_catalogue(declared, {"files": renamed}).contracts

    assert set(contracts) == {"reports_read"}
    assert contracts["reports_read"].input_schema == READ.input_schema
    assert declared.servers[0].server_name("reports_read") == "read_text_file"
    assert declared.servers[0].server_name("anything_else") == "anything_else"


def test_renaming_leaves_out_a_listed_tool_whose_name_another_is_offered_under() -> None:
    clash = dataclasses.replace(WRITE, name="reports_read")  # the server lists a tool of that name too
    renamed = ServerListing("files", "2025-11-25", (READ, clash)).renamed({"read_text_file": "reports_read"})

    assert [(tool.name, tool.description) for tool in renamed.tools] == [("reports_read", READ.description)]


def test_two_tools_may_swap_names() -> None:
    other = dataclasses.replace(READ, name="read_file", description="Read a file, the old way")
    swapped = ServerListing("files", "2025-11-25", (READ, other)).renamed(
        {"read_text_file": "read_file", "read_file": "read_text_file"}
    )

    assert {tool.name: tool.description for tool in swapped.tools} == {
        "read_file": READ.description,
        "read_text_file": other.description,
    }


WRITES = """\
servers:
  - name: files
    transport: stdio
    command: node
    tools:
      read_text_file:
        scope: files:read
        risk: read_only
      write_file:
        scope: files:write
        risk: reversible_write
        operation:
          approval: policy
          idempotency_key: request_id
          reconcile: {tool: read_text_file, arguments: {path: path}, exists: exists}
"""
KEYED_WRITE = dataclasses.replace(
    WRITE,
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "request_id": {"type": "string"},
        },
        "required": ["path", "request_id"],
        "additionalProperties": False,
    },
)


def test_a_write_with_an_operation_is_offered_without_the_key_raydag_sets_and_carries_its_declaration() -> (
    None
):
    catalogue = build_catalogue(toolsets(WRITES), listing(READ, KEYED_WRITE))

    write = catalogue.contracts["write_file"]
    assert write.risk is Risk.REVERSIBLE_WRITE
    assert write.operation is not None
    assert (write.operation.key_argument, write.operation.reconcile is not None) == ("request_id", True)
    assert "request_id" not in write.input_schema["properties"]  # a planner never sees or writes it
    assert write.input_schema["required"] == ["path"]
    assert write.input_problem({"path": "/r/a", "content": "x"}) is None  # checked without it, sent with it


def test_an_idempotency_key_the_tool_does_not_take_is_a_startup_error() -> None:
    with pytest.raises(ToolsetMismatch, match="idempotency_key names 'request_id'"):
        build_catalogue(toolsets(WRITES), listing(READ, WRITE))


@pytest.mark.parametrize(
    ("execution", "task"),
    [
        ({"taskSupport": "required"}, True),
        ({"taskSupport": "optional"}, True),
        ({"taskSupport": "forbidden"}, False),
        ({"taskSupport": "whenever"}, False),  # a value the protocol does not have: called as before
        (None, False),
    ],
)
def test_a_tool_is_called_as_a_task_where_its_listing_says_it_runs_as_one(
    execution: dict[str, str] | None, task: bool
) -> None:
    wire = {"name": "read_text_file", "inputSchema": READ.input_schema, "annotations": {"readOnlyHint": True}}
    if execution is not None:
        wire["execution"] = execution
    listed = ToolDefinition.of(wire)

    assert build_catalogue(toolsets(), listing(listed)).contracts["read_text_file"].task is task
    assert listed.definition == ToolDefinition.of({**wire, "execution": None}).definition  # pins unchanged

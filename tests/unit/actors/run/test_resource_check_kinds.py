"""Resource checks as the toolsets file declares them: a callable by import path, or a designated tool."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from actors.calls.call import ToolOutcome
from actors.launch.settings import shipped_toolsets
from actors.run.resource_check import ResourceCheckUnavailable, checks_for, resource_checks
from actors.toolsets.config import parse_toolsets
from dag.contracts import ToolContract
from dag.events import ErrorKind, NodeError
from dag.policy import Principal
from dag.run_resource import RESOURCE_ALLOWED, ResourceAnswer
from mcp_server.contracts import CASEOPS_TOOLS

ALICE = Principal("tenant-demo", "alice", frozenset({"cases:read"}))
AT = datetime(2026, 7, 18, tzinfo=UTC)


class Cases:
    """The one query the caseops check makes, answered from a table of (tenant, case) rows."""

    def __init__(self, *rows: tuple[str, str]) -> None:
        self.rows = set(rows)

    async def fetchval(self, query: str, tenant_id: str, case_id: str) -> int | None:
        assert query.startswith("SELECT 1 FROM cases WHERE tenant_id = $1 AND case_id = $2")
        return 1 if (tenant_id, case_id) in self.rows else None


def unused_tool(*_: Any) -> Any:
    raise AssertionError("a callable check calls no tool")


async def test_the_caseops_check_answers_another_tenants_case_exactly_as_an_unknown_one() -> None:
    database = Cases(("tenant-demo", "C-102"), ("tenant-other", "C-201"))
    checks = resource_checks(
        shipped_toolsets("http://127.0.0.1:1/mcp"), CASEOPS_TOOLS, database=database, call_tool=unused_tool
    )
    (check,) = checks_for(checks, list(CASEOPS_TOOLS))

    assert await check(ALICE, {"case_id": "C-102"}) == RESOURCE_ALLOWED
    theirs, unknown = await check(ALICE, {"case_id": "C-201"}), await check(ALICE, {"case_id": "C-999"})
    assert theirs == unknown == ResourceAnswer(False, "case-not-found", "no case with this id was found")


TOOL_CHECKED = """\
version: 1
servers:
  - name: caseops
    transport: streamable-http
    url: http://127.0.0.1:1/mcp
    resource_check: {tool: caseops_get_case_snapshot}
    tools:
      caseops_get_case_snapshot: {scope: cases:read, risk: read_only, run_bound: {case_id: case_id}}
      caseops_get_policy_requirements: {scope: policies:read, risk: read_only, run_bound: {case_id: case_id}}
"""


class ScriptedTool:
    """Answers each call with the next scripted outcome; records what it was asked."""

    def __init__(self, *errors: NodeError | None) -> None:
        self.errors = list(errors)
        self.calls: list[tuple[Principal, Mapping[str, str], str, dict[str, Any]]] = []

    async def __call__(
        self, principal: Principal, resource: Mapping[str, str], contract: ToolContract, args: dict[str, Any]
    ) -> ToolOutcome:
        self.calls.append((principal, resource, contract.name, args))
        return ToolOutcome(
            output={} if self.errors[0] is None else None,
            error=self.errors.pop(0),
            started_at=AT,
            finished_at=AT,
        )

    def assert_done(self) -> None:
        assert self.errors == [], f"unused outcomes: {self.errors}"


async def test_a_tool_check_calls_its_tool_with_the_resources_bound_arguments_and_believes_its_answer() -> (
    None
):
    refused = NodeError(kind=ErrorKind.BUSINESS, code="CASE_NOT_FOUND", message="case 'C-999' was not found")
    tool = ScriptedTool(None, refused)
    checks = resource_checks(
        parse_toolsets(TOOL_CHECKED, "t.yaml"), CASEOPS_TOOLS, database=None, call_tool=tool
    )
    (check,) = checks_for(checks, ["caseops_get_policy_requirements", "caseops_get_case_snapshot"])

    allowed = await check(ALICE, {"case_id": "C-102"})
    denied = await check(ALICE, {"case_id": "C-999"})

    tool.assert_done()
    assert (allowed, denied) == (RESOURCE_ALLOWED, ResourceAnswer(False))
    assert [(name, args) for _, _, name, args in tool.calls] == [
        ("caseops_get_case_snapshot", {"case_id": "C-102"}),
        ("caseops_get_case_snapshot", {"case_id": "C-999"}),
    ]
    assert tool.calls[0][:2] == (ALICE, {"case_id": "C-102"})


async def test_a_tool_check_whose_call_got_no_answer_cannot_answer_either() -> None:
    tool = ScriptedTool(NodeError(kind=ErrorKind.TRANSIENT, code="TIMEOUT", message="no result"))
    checks = resource_checks(
        parse_toolsets(TOOL_CHECKED, "t.yaml"), CASEOPS_TOOLS, database=None, call_tool=tool
    )

    with pytest.raises(ResourceCheckUnavailable, match="TIMEOUT"):
        await checks["caseops_get_case_snapshot"](ALICE, {"case_id": "C-102"})
    tool.assert_done()


def test_a_server_without_a_check_leaves_its_tools_to_the_policy_alone() -> None:
    unchecked = TOOL_CHECKED.replace("    resource_check: {tool: caseops_get_case_snapshot}\n", "")

    checks = resource_checks(
        parse_toolsets(unchecked, "t.yaml"), CASEOPS_TOOLS, database=None, call_tool=unused_tool
    )

    assert checks == {}
    assert checks_for(checks, list(CASEOPS_TOOLS)) == []

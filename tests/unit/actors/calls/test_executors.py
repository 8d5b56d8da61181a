"""Transport selection: a Ray task per call can reach only raydag-token HTTP servers."""

from __future__ import annotations

import pytest

from actors.calls.call import ExecutorKind
from actors.calls.executors import PlacedCallers, RayToolExecutor, build_executor
from actors.toolsets.config import ToolsetsInvalid, parse_toolsets

TOOLSETS = """\
servers:
  - name: caseops
    transport: streamable-http
    url: https://caseops.example/mcp
    auth: raydag-token
    tools: {caseops_get_case_snapshot: {scope: cases:read, risk: read_only}}
  - name: files
    transport: stdio
    command: node
    tools: {read_text_file: {scope: files:read, risk: read_only}}
  - name: everything
    transport: streamable-http
    url: https://everything.example/mcp
    auth: {mode: bearer, env: TOKEN}
    tools: {echo: {scope: demo:read, risk: read_only}}
"""


def test_the_task_executor_refuses_servers_a_task_cannot_reach() -> None:
    servers = parse_toolsets(TOOLSETS, "toolsets.yaml", {}).servers

    with pytest.raises(
        ValueError, match=r"servers \['files', 'everything'\] need RAYDAG_TOOL_EXECUTOR=callers"
    ):
        build_executor(ExecutorKind.TASKS, {}, callers=2, name_prefix="p", namespace="n", servers=servers)


def test_the_task_executor_takes_raydag_token_servers() -> None:
    servers = parse_toolsets(TOOLSETS, "toolsets.yaml", {}).servers[:1]

    executor = build_executor(
        ExecutorKind.TASKS, {}, callers=2, name_prefix="p", namespace="n", servers=servers
    )

    assert isinstance(executor, RayToolExecutor)


PLACED = """\
servers:
  - name: caseops
    transport: streamable-http
    url: https://caseops.example/mcp
    auth: raydag-token
    tools: {caseops_get_case_snapshot: {scope: cases:read, risk: read_only}}
  - name: files
    transport: stdio
    command: node
    placement: {resources: {files-host: 0.01}}
    tools: {read_text_file: {scope: files:read, risk: read_only}}
"""


@pytest.mark.parametrize("kind", [ExecutorKind.TASKS, ExecutorKind.SUPERVISOR])
def test_a_placed_server_needs_callers_that_can_run_where_it_says(kind: ExecutorKind) -> None:
    servers = parse_toolsets(PLACED, "toolsets.yaml", {}).servers

    with pytest.raises(ValueError, match=r"servers \['files'\] name a placement"):
        build_executor(kind, {}, callers=2, name_prefix="p", namespace="n", servers=servers)


def test_a_placed_server_gets_a_caller_pool_of_its_own_and_the_others_share_one() -> None:
    servers = parse_toolsets(PLACED, "toolsets.yaml", {}).servers

    callers = PlacedCallers.of({}, size=2, name_prefix="sup-tool-caller", namespace="n", servers=servers)

    assert callers.names == [
        "sup-tool-caller-0",
        "sup-tool-caller-1",
        "sup-tool-caller-files-0",
        "sup-tool-caller-files-1",
    ]
    assert (callers.placed("files"), callers.placed("caseops")) == (True, False)


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("{CPU: 1}", "not a custom Ray resource name"),
        ("{files-host: 0}", "an amount above 0"),
        ("{}", "at least 1 item"),
        ("{'has space': 1}", "not a custom Ray resource name"),
    ],
)
def test_a_placement_names_custom_resources_in_positive_amounts(resources: str, message: str) -> None:
    text = PLACED.replace("{resources: {files-host: 0.01}}", f"{{resources: {resources}}}")

    with pytest.raises(
        ToolsetsInvalid, match=rf"toolsets.yaml:10: servers\[1\].placement.resources: .*{message}"
    ):
        parse_toolsets(text, "toolsets.yaml", {})

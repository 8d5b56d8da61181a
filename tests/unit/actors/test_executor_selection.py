"""Transport selection: a Ray task per call can reach only raydag-token HTTP servers."""

from __future__ import annotations

import pytest

from actors.calls.call import ExecutorKind
from actors.calls.executors import RayToolExecutor, build_executor
from actors.toolsets.config import parse_toolsets

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

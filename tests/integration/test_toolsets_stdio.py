"""stdio toolset servers on Ray: @modelcontextprotocol/server-filesystem discovered and called through a real
ToolCaller actor; the server a child of the actor, restarted when it dies, gone when the actor goes; a death
mid-call a transient error the runtime retries for a read-only tool."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections
from actors.calls.mcp.discovery import discover, discover_toolsets, relist
from actors.toolsets.catalogue import ToolsetMismatch, build_catalogue
from dag.events import ErrorKind
from dag.retry import RetryPolicy
from dag.schemas import JsonSchema
from tests.integration.toolset_servers import filesystem, filesystem_toolsets, toy_stdio, toy_toolsets

pytestmark = pytest.mark.conformance  # needs the pinned Node tools of tests/node


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    for index in range(3):
        (folder / f"r{index}.txt").write_text(f"report {index}\n")
    return folder


def call_of(tool: str, args: dict[str, Any], server: str = "files", attempt: int = 1) -> ToolCall:
    return ToolCall("run", f"n-{tool}", attempt, tool, args, "", "", 10.0, server=server)


async def test_the_filesystem_server_is_discovered_over_stdio_in_the_2025_era(root: Path) -> None:
    listing = await discover(filesystem(root))

    assert listing.protocol_version == "2025-11-25"
    names = {tool.name for tool in listing.tools}
    assert {"list_directory", "read_text_file", "write_file", "move_file"} <= names
    assert listing.tool("write_file").hint("destructiveHint") is True  # type: ignore[union-attr]
    catalogue = build_catalogue(filesystem_toolsets(root), {"files": listing})
    assert set(catalogue.contracts) == {"list_directory", "read_text_file"}
    assert "write_file" in catalogue.unoffered["files"]
    assert catalogue.contracts["read_text_file"].output_schema is not None


async def test_declaring_a_destructive_filesystem_tool_read_only_is_a_startup_error(root: Path) -> None:
    tools = "      write_file: {scope: files:write, risk: read_only}\n"
    listing = await discover(filesystem(root))

    with pytest.raises(
        ToolsetMismatch, match="'write_file': declared read_only, but the server marks it destructive"
    ):
        build_catalogue(filesystem_toolsets(root, tools), {"files": listing})


@pytest.fixture
def caller(ray_cluster: None, root: Path) -> Iterator[Any]:
    import ray

    from actors.calls.caller import ToolCaller

    actor = ray.remote(ToolCaller).options(max_concurrency=32, num_cpus=0).remote([filesystem(root)])
    ray.get(actor.start.remote())
    yield actor
    ray.kill(actor)


async def stdio_pids(caller: Any, within_s: float = 30) -> tuple[int, int]:
    deadline = time.monotonic() + within_s
    while True:
        status = (await caller.ping.remote())["stdio"].get("files")
        if status and status["running"] and status["server_pid"]:
            return status["guardian_pid"], status["server_pid"]
        assert time.monotonic() < deadline, f"the stdio server did not start: {status}"
        await asyncio.sleep(0.1)


async def test_a_tool_caller_lists_and_reads_the_files_of_its_stdio_server_concurrently(
    caller: Any, root: Path
) -> None:
    listing = await caller.list_tools.remote("files")
    contracts = build_catalogue(filesystem_toolsets(root), {"files": listing}).contracts

    listed = await caller.call.remote(
        call_of("list_directory", {"path": str(root)}), contracts["list_directory"]
    )
    reads = await asyncio.gather(
        *(
            caller.call.remote(
                call_of("read_text_file", {"path": str(root / f"r{i}.txt")}), contracts["read_text_file"]
            )
            for i in range(3)
        )
    )

    assert listed.error is None
    assert listed.output == {"content": "[FILE] r0.txt\n[FILE] r1.txt\n[FILE] r2.txt"}
    assert [read.output for read in reads] == [{"content": f"report {i}\n"} for i in range(3)]
    ping = await caller.ping.remote()
    assert ping["calls"] == 4
    assert ping["stdio"]["files"]["starts"] == 1  # one server, one session, every call multiplexed on it
    assert any("Secure MCP Filesystem Server" in line for line in ping["stdio"]["files"]["stderr_tail"])


async def test_the_server_is_a_child_of_the_caller_and_is_gone_when_the_caller_is_killed(caller: Any) -> None:
    import ray

    guardian, server = await stdio_pids(caller)
    actor_pid = (await caller.ping.remote())["pid"]
    assert psutil.Process(guardian).ppid() == actor_pid
    assert psutil.Process(server).ppid() == guardian

    ray.kill(caller, no_restart=True)  # SIGKILL: the actor runs no clean-up of its own

    deadline = time.monotonic() + 15
    while any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        for pid in (guardian, server)
    ):
        assert time.monotonic() < deadline, "the stdio server outlived the actor that owned it"
        await asyncio.sleep(0.1)


async def test_a_server_that_dies_is_restarted_and_the_next_call_succeeds(caller: Any, root: Path) -> None:
    listing = await caller.list_tools.remote("files")
    contract = build_catalogue(filesystem_toolsets(root), {"files": listing}).contracts["read_text_file"]
    _, server = await stdio_pids(caller)

    os.kill(server, signal.SIGKILL)
    await asyncio.sleep(0.2)
    outcome = await caller.call.remote(call_of("read_text_file", {"path": str(root / "r1.txt")}), contract)

    assert outcome.error is None, outcome.error
    assert outcome.output == {"content": "report 1\n"}
    _, restarted = await stdio_pids(caller)
    assert restarted != server
    assert (await caller.ping.remote())["stdio"]["files"]["starts"] == 2


async def test_a_server_dying_mid_call_is_a_transient_error_retried_for_a_read_only_tool() -> None:
    toy = toy_stdio()
    async with McpConnections([toy]) as connections:
        listing = await connections.list_tools("toy")
        contracts = build_catalogue(toy_toolsets(), {"toy": listing}).contracts
        echo = await connections.call(call_of("echo", {"text": "hi"}, "toy"), contracts)
        assert echo.output is not None
        pid = echo.output["pid"]
        slow = asyncio.create_task(connections.call(call_of("sleep", {"seconds": 20}, "toy"), contracts))
        await asyncio.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        died = await asyncio.wait_for(slow, 10)
        again = await connections.call(call_of("echo", {"text": "again"}, "toy", attempt=2), contracts)

    assert died.error is not None
    assert (died.error.kind, died.error.code) == (ErrorKind.TRANSIENT, "CONNECTION_FAILED")
    delay = RetryPolicy().next_delay(
        contracts["sleep"], died.error, attempt=1, remaining_s=60, rng=random.Random(1)
    )
    assert delay is not None  # read-only, transient, attempts left: the runtime tries again
    assert again.output is not None
    assert again.output["pid"] != pid


async def test_an_output_outside_the_pinned_output_schema_is_a_protocol_error(root: Path) -> None:
    spec = filesystem(root)
    async with McpConnections([spec]) as connections:
        listing = await connections.list_tools("files")
        contract = build_catalogue(filesystem_toolsets(root), {"files": listing}).contracts["read_text_file"]
        stricter = dataclasses.replace(
            contract,
            declared_output=JsonSchema.of(
                {
                    "type": "object",
                    "required": ["content", "encoding"],
                    "properties": {"content": {"type": "string"}},
                }
            ),
        )
        outcome = await connections.call(
            call_of("read_text_file", {"path": str(root / "r0.txt")}), {"read_text_file": stricter}
        )

    assert outcome.error is not None
    assert (outcome.error.kind, outcome.error.code) == (ErrorKind.PROTOCOL, "OUTPUT_SCHEMA_MISMATCH")
    assert "'encoding' is a required property" in outcome.error.message


async def test_a_caller_restarted_by_ray_starts_its_server_again_and_the_old_one_is_gone(
    ray_cluster: None, root: Path
) -> None:
    import ray

    from actors.calls.caller import ToolCaller

    actor = (
        ray.remote(ToolCaller)
        .options(max_concurrency=8, num_cpus=0, max_restarts=-1)
        .remote([filesystem(root)])
    )
    try:
        guardian, server = await stdio_pids(actor)  # no call made: it started with the actor
        first_pid = (await actor.ping.remote())["pid"]

        os.kill(first_pid, signal.SIGKILL)  # the actor's process dies; Ray starts another

        deadline = time.monotonic() + 60
        while True:
            try:
                ping = await actor.ping.remote()
                if ping["pid"] != first_pid and ping["stdio"].get("files", {}).get("running"):
                    break
            except ray.exceptions.RayActorError:
                pass
            assert time.monotonic() < deadline, "the restarted caller did not start its stdio server"
            await asyncio.sleep(0.2)
        assert ping["calls"] == 0
        assert not psutil.pid_exists(server) or psutil.Process(server).status() == psutil.STATUS_ZOMBIE
        assert not psutil.pid_exists(guardian) or psutil.Process(guardian).status() == psutil.STATUS_ZOMBIE
    finally:
        ray.kill(actor, no_restart=True)


async def test_relisting_a_server_that_changed_a_tool_reports_that_tool_and_only_it() -> None:
    catalogue = await discover_toolsets(toy_toolsets())
    pins = catalogue.pins["toy"]

    same = await relist(toy_stdio(), pins)
    changed = await relist(toy_stdio(echo_description="Echo the text, and keep a copy"), pins)

    assert same.unchanged
    assert (changed.changed, changed.added, changed.removed) == (("echo",), (), ())
    assert changed.broken == frozenset({"echo"})
    assert changed.describe() == "toy: changed echo"

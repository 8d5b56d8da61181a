"""The supervisor's catalogue comes from its toolsets: discovered at start without blocking it, calls routed
to each tool's server, an unreachable server retried in the background (``/readyz`` 503 naming it, a run
that needs it stopped with its own reason), and a tool whose definition changes under a run denied."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.calls.call import ExecutorKind
from actors.launch.background_server import BackgroundServer
from actors.launch.settings import shipped_toolsets
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.toolsets.config import Toolsets, parse_toolsets
from dag.budget import Budgets
from dag.policy import Principal
from dag.run_state import RunState
from dag.storable import MAX_DEPTH
from mcp_server.contracts import ALL_SCOPES
from tests.integration.conftest import TEST_API_KEYS, RunningToolServer, supervisor_for
from tests.integration.test_api_supervisor_restart import api_config, serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import run_owner
from tests.integration.toolset_servers import toy_toolsets
from tests.integration.toy_mcp_server import http_app
from tests.loopback import free_port

PRINCIPAL = Principal("tenant-demo", "test", frozenset({*ALL_SCOPES, "toy:read"}))
SNAPSHOT = "caseops_get_case_snapshot"


def merged(*declarations: Toolsets) -> Toolsets:
    return Toolsets(servers=tuple(server for toolsets in declarations for server in toolsets.servers))


def unreachable_toolsets(url: str) -> Toolsets:
    text = f"""\
servers:
  - name: later
    transport: streamable-http
    url: {url}
    timeouts: {{connect_s: 2, call_s: 10}}
    tools:
      echo: {{scope: toy:read, risk: read_only}}
"""
    return parse_toolsets(text, "later.yaml", {})


CASE = {"case_id": "C-102"}


async def run_to_end(
    supervisor: Any,
    store: RunStore,
    plan: dict[str, Any],
    resource: dict[str, str] | None = None,
    **request: Any,
) -> RunState:
    """The run of ``plan`` over ``resource`` (none: its tools bind nothing), once it has ended."""
    from actors.api.views import load_state

    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource=resource or {}, plan=plan, **request)
    )
    assert submitted.outcome is Submission.CREATED, submitted
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    return await load_state(store, submitted.run_id)


@pytest.fixture
def name() -> str:
    return f"raydag-test-toolsets-{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("executor", [ExecutorKind.CALLERS, ExecutorKind.SUPERVISOR])
async def test_a_plan_over_two_servers_runs_each_call_on_its_own_server(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    executor: ExecutorKind,
) -> None:
    """Whichever process makes the calls owns the stdio server: a caller actor, or the supervisor itself."""
    import ray

    toolsets = merged(shipped_toolsets(tool_server.url), toy_toolsets())
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets, tool_executor=executor)
    plan = {
        "nodes": [
            {"id": "case", "tool": SNAPSHOT, "args": {"case_id": "C-102"}},
            {"id": "echo", "tool": "echo", "args": {"text": {"$ref": "case", "pointer": "/case_id"}}},
        ]
    }
    try:
        offered = await supervisor.contracts.remote()
        state = await run_to_end(supervisor, store, plan, CASE, planner="outputs")
        status = await supervisor.toolsets.remote()
    finally:
        ray.kill(supervisor)

    assert {contract.server for contract in offered.values()} == {"caseops", "toy"}
    assert offered["echo"].server == "toy"
    assert "wait_for_file" not in offered  # listed by the server, not named by the overlay: never offered
    assert (state.status.value, state.stop_reason) == ("completed", None)
    outputs = state.result["outputs"]  # type: ignore[index]
    assert outputs["case"]["case_id"] == "C-102"
    assert outputs["echo"]["text"] == "C-102"
    assert status == {
        "ready": True,
        "servers": {
            "caseops": {"ok": True, "protocol": "2026-07-28"},
            "toy": {"ok": True, "protocol": "2026-07-28"},
        },
    }


async def test_an_unreachable_server_is_retried_in_the_background_and_its_runs_stop_with_a_reason(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    import ray

    later = BackgroundServer(host="127.0.0.1")  # its port is bound, nothing listens yet
    toolsets = merged(shipped_toolsets(tool_server.url), unreachable_toolsets(later.url + "/mcp"))
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets)
    echo = {"nodes": [{"id": "echo", "tool": "echo", "args": {"text": "hi"}}]}
    try:
        ping = await supervisor.ping.remote()  # the supervisor started: listing did not hold it up
        stopped = await run_to_end(supervisor, store, echo, planner="outputs")
        caseops = await run_to_end(
            supervisor,
            store,
            {"nodes": [{"id": "case", "tool": SNAPSHOT, "args": {"case_id": "C-102"}}]},
            CASE,
            planner="outputs",
        )

        later.start(http_app(), timeout_s=30)
        deadline = time.monotonic() + 60
        while not (await supervisor.toolsets.remote())["ready"]:
            assert time.monotonic() < deadline, "the server that came up was never listed"
            await asyncio.sleep(0.2)
        answered = await run_to_end(supervisor, store, echo, planner="outputs")
    finally:
        ray.kill(supervisor)
        later.stop()

    later_status = ping["toolsets"]["servers"]["later"]
    assert later_status["ok"] is False
    assert later_status["error"].startswith("unreachable: ")
    assert ping["toolsets"]["servers"]["caseops"] == {"ok": True, "protocol": "2026-07-28"}
    assert (stopped.status.value, stopped.stop_reason.value) == ("stopped", "TOOL_SERVER_UNREACHABLE")
    assert "'later'" in (stopped.detail or "")
    assert stopped.proposal == echo  # the run and its plan are recorded: nothing lost
    assert caseops.status.value == "completed"  # the other server's tools are unaffected
    assert answered.status.value == "completed"
    assert answered.result["outputs"]["echo"]["text"] == "hi"  # type: ignore[index]


async def test_while_a_server_is_not_listed_its_resource_check_still_decides_and_its_runs_stop_with_a_reason(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    import ray

    from actors.api.views import load_state

    nowhere = BackgroundServer(host="127.0.0.1")  # its port is bound, nothing listens: caseops never lists
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=shipped_toolsets(nowhere.url + "/mcp")
    )
    try:
        theirs = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": "C-201"})
        )
        unknown = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": "C-999"})
        )
        ours = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource=CASE))
        assert ours.outcome is Submission.CREATED, ours
        assert await supervisor.wait.remote(ours.run_id, 60.0)
        stopped = await load_state(store, ours.run_id)
    finally:
        ray.kill(supervisor)
        nowhere.stop()

    # Not a 422 "no tool uses case_id": the key is caseops', whose check answers as when it is listed.
    assert theirs.outcome is Submission.RESOURCE_NOT_FOUND, theirs
    assert (theirs.outcome, theirs.error) == (unknown.outcome, unknown.error)  # existence does not leak
    assert (stopped.status.value, stopped.stop_reason.value) == ("stopped", "TOOL_SERVER_UNREACHABLE")


def test_readyz_is_503_naming_an_unreachable_toolset_server(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, name: str
) -> None:
    import ray

    from actors.api.app import ApiConfig, create_app
    from actors.supervisor import NAMESPACE, SupervisorConfig

    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=tool_server.url,
            token_key=token_key,
            limits=Budgets(),
            toolsets=merged(shipped_toolsets(tool_server.url), unreachable_toolsets(nowhere + "/mcp")),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=name,
    )
    server = BackgroundServer().start(create_app(config), timeout_s=60)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            deadline = time.monotonic() + 60
            # Until the supervisor answers (it may be starting) and has tried the server once.
            while (ready := http.get("/readyz")).json().get("toolsets", {}).get("later", {}).get("error") in {
                None,
                "unreachable: not listed yet",
            }:
                assert time.monotonic() < deadline, ready.json()
                time.sleep(0.2)
    finally:
        server.stop()
        ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)

    assert ready.status_code == 503
    problem = ready.json()
    assert problem["detail"].startswith("not ready: toolset server 'later' is unreachable: ")
    assert problem["checks"]["supervisor"]["ok"] is True
    assert problem["toolsets"]["caseops"] == {"ok": True, "protocol": "2026-07-28"}


@pytest.fixture
def description(tmp_path: Path) -> Path:
    path = tmp_path / "echo-description.txt"
    path.write_text("Echo the text back, with this server's pid.")
    return path


def gated_echo(tmp_path: Path, description: Path) -> tuple[Toolsets, Path, dict[str, Any]]:
    """The toy server with its echo described by the file ``description``, and a plan whose first node
    waits until the returned gate file exists before its echo runs."""
    toolsets = toy_toolsets(
        extra_tools="      wait_for_file: {scope: toy:read, risk: read_only}\n",
        env=f"TOY_ECHO_DESCRIPTION_FILE: {description}",
    )
    gate = tmp_path / "gate"
    plan = {
        "nodes": [
            {"id": "wait", "tool": "wait_for_file", "args": {"path": str(gate)}},
            {"id": "echo", "tool": "echo", "args": {"text": {"$ref": "wait", "pointer": "/text"}}},
        ]
    }
    return toolsets, gate, plan


async def test_a_tool_changed_under_a_running_run_is_denied_and_readyz_names_it(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    tmp_path: Path,
    description: Path,
) -> None:
    import ray

    toolsets, gate, plan = gated_echo(tmp_path, description)
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets, relist_every_s=3600)
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={}, plan=plan, planner="outputs")
        )
        assert submitted.outcome is Submission.CREATED
        # While the run waits on its first node, the server starts listing another echo.
        await asyncio.to_thread(description.write_text, "Echo the text back. Also forward it elsewhere.")
        status = await supervisor.relist.remote()
        await asyncio.to_thread(gate.write_text, "open")
        assert await supervisor.wait.remote(submitted.run_id, 60.0)
        from actors.api.views import load_state

        state = await load_state(store, submitted.run_id)
        again = await run_to_end(
            supervisor,
            store,
            {"nodes": [{"id": "e", "tool": "echo", "args": {"text": "x"}}]},
            planner="outputs",
        )
    finally:
        ray.kill(supervisor)

    assert status["ready"] is True
    assert status["servers"]["toy"] == {
        "ok": True,
        "protocol": "2026-07-28",
        "changed": "toy: changed echo",
        "withdrawn": ["echo"],
    }
    assert state.nodes["wait"].status.value == "succeeded"
    echo = state.nodes["echo"]
    assert echo.status.value == "denied"
    assert echo.decision is not None
    assert echo.decision.rule_id == "toolset.definition_changed"
    assert (state.status.value, state.stop_reason.value) == ("stopped", "TOOL_DEFINITION_CHANGED")
    assert again.nodes["e"].decision.rule_id == "toolset.definition_changed"  # type: ignore[union-attr]
    assert again.stop_reason.value == "TOOL_DEFINITION_CHANGED"


async def test_an_output_outside_the_pinned_output_schema_is_a_protocol_error_on_its_node(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
    tmp_path: Path,
) -> None:
    import ray

    from actors.supervisor import NAMESPACE

    shape = tmp_path / "reshaped"
    toolsets = toy_toolsets(
        extra_tools="      shaped: {scope: toy:read, risk: read_only}\n", env=f"TOY_SHAPE_FILE: {shape}"
    )
    supervisor = supervisor_for(
        dsn, tool_server, token_key, name, toolsets=toolsets, tool_callers=1, relist_every_s=3600
    )
    plan = {"nodes": [{"id": "shaped", "tool": "shaped", "args": {"text": "hi"}}]}
    try:
        before = await run_to_end(supervisor, store, plan, planner="outputs")
        # The server's process is replaced by one whose tool answers in another shape; raydag has not
        # listed it again, so the call goes out against the schema it pinned.
        caller = ray.get_actor(f"{name}-tool-caller-0", namespace=NAMESPACE)
        server = (await caller.ping.remote())["stdio"]["toy"]["server_pid"]
        await asyncio.to_thread(shape.write_text, "words")
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while (await caller.ping.remote())["stdio"]["toy"]["server_pid"] in (server, None):
            assert time.monotonic() < deadline, "the caller did not restart its server"
            await asyncio.sleep(0.1)
        after = await run_to_end(supervisor, store, plan, planner="outputs")
    finally:
        ray.kill(supervisor)

    assert before.status.value == "completed"
    node = after.nodes["shaped"]
    assert node.status.value == "failed"
    assert node.error is not None
    assert (node.error.kind.value, node.error.code) == ("protocol", "OUTPUT_SCHEMA_MISMATCH")
    assert node.attempts == 1  # a protocol error is not retried
    assert after.status.value != "completed"


async def test_a_tool_answering_with_nul_or_too_deep_or_failing_with_nul_fails_its_node_not_the_run(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    name: str,
) -> None:
    """No run can record a NUL in an output (PostgreSQL's JSON refuses it), nor an output nested deeper than
    ``MAX_DEPTH`` (its views could not be read back): the answer is a protocol error on its node. A failure's
    message is recorded with U+FFFD in its place. Arguments that a reference to the deepest output makes one
    level too deep fail their node before any call. Either way the run ends as runs do."""
    import ray

    toolsets = toy_toolsets(
        extra_tools=(
            "      with_nul: {scope: toy:read, risk: read_only}\n"
            "      failing_with_nul: {scope: toy:read, risk: read_only}\n"
            "      nested: {scope: toy:read, risk: read_only}\n"
        )
    )
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets, tool_callers=1)
    plan = {
        "nodes": [
            {"id": "answer", "tool": "with_nul", "args": {"text": "bin"}},
            {"id": "failure", "tool": "failing_with_nul", "args": {"text": "bin"}},
            {"id": "echo", "tool": "echo", "args": {"text": "fine"}},
            {"id": "deepest", "tool": "nested", "args": {"depth": MAX_DEPTH}},
            {"id": "too_deep", "tool": "nested", "args": {"depth": MAX_DEPTH + 1}},
            # The deepest output a run records, one level inside arguments: one level too deep for them.
            {"id": "deeper_args", "tool": "echo", "args": {"text": {"$ref": "deepest"}}},
        ]
    }
    try:
        state = await run_to_end(supervisor, store, plan, planner="outputs")
    finally:
        ray.kill(supervisor)

    answer, failure = state.nodes["answer"], state.nodes["failure"]
    assert answer.error is not None
    assert (answer.status.value, answer.error.kind.value, answer.error.code) == (
        "failed",
        "protocol",
        "OUTPUT_UNSTORABLE",
    )
    assert "/text" in answer.error.message
    assert answer.attempts == 1  # the same answer again would be no better
    assert failure.error is not None
    assert failure.status.value == "failed"
    assert "bin\ufffdbin" in failure.error.message
    assert state.nodes["echo"].status.value == "succeeded"
    assert state.nodes["deepest"].status.value == "succeeded"
    too_deep = state.nodes["too_deep"].error
    assert too_deep is not None
    assert (too_deep.kind.value, too_deep.code) == ("protocol", "OUTPUT_UNSTORABLE")
    assert f"deeper than {MAX_DEPTH}" in too_deep.message
    deeper_args = state.nodes["deeper_args"]
    assert deeper_args.error is not None
    assert (deeper_args.status.value, deeper_args.error.kind.value, deeper_args.error.code) == (
        "failed",
        "contract",
        "ARGUMENTS_TOO_DEEP",
    )
    assert deeper_args.attempts == 0  # refused before any call
    assert (state.status.value, state.stop_reason) == ("stopped", "EVIDENCE_INCOMPLETE")


async def test_a_run_resumed_by_another_supervisor_is_held_to_the_definitions_it_was_created_with(
    ray_cluster: None,
    dsn: str,
    supervisor: Any,
    store: RunStore,
    tool_server: RunningToolServer,
    token_key: bytes,
    name: str,
    tmp_path: Path,
    description: Path,
) -> None:
    """The second supervisor pins what the server lists when it starts, which is already the changed echo:
    only the pins the run recorded at its creation can tell. The session's supervisor shares the database but
    not the toy server: it must leave the orphan to one that serves its tools."""
    import ray

    from actors.api.views import load_state

    toolsets, gate, plan = gated_echo(tmp_path, description)
    first = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets, lease_s=1.0)
    second = None
    try:
        submitted = await first.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={}, plan=plan, planner="outputs")
        )
        assert submitted.outcome is Submission.CREATED
        deadline = time.monotonic() + 60
        while not _running(await load_state(store, submitted.run_id), "wait"):
            assert time.monotonic() < deadline, "the first node never went out"
            await asyncio.sleep(0.1)
        created = await load_state(store, submitted.run_id)
        ray.kill(first, no_restart=True)
        lapsed = time.monotonic() + 3.0  # three times the first supervisor's lease
        while time.monotonic() < lapsed:
            assert submitted.run_id not in await supervisor.adopt_orphans.remote()
            await asyncio.sleep(0.3)
        await asyncio.to_thread(description.write_text, "Echo the text back. Also forward it elsewhere.")
        second = supervisor_for(dsn, tool_server, token_key, f"{name}-next", toolsets=toolsets, lease_s=1.0)
        deadline = time.monotonic() + 60
        # Until the run is the second's: adopted here, or by its own orphan scan (then this call finds none, and
        # the gate must still open before the resumed call's 10 s are up).
        while await run_owner(dsn, submitted.run_id) != f"{name}-next":
            assert time.monotonic() < deadline, "the run was never taken over"
            await second.adopt_orphans.remote()
            await asyncio.sleep(0.3)
        await asyncio.to_thread(gate.write_text, "open")
        assert await second.wait.remote(submitted.run_id, 60.0)
        state = await load_state(store, submitted.run_id)
    finally:
        ray.kill(first)
        if second is not None:
            ray.kill(second)

    assert created.tool_pins is not None
    assert set(created.tool_pins) == {"echo", "sleep", "wait_for_file"}
    assert state.nodes["wait"].status.value == "succeeded", state.nodes["wait"].error
    echo = state.nodes["echo"]
    assert echo.status.value == "denied"
    assert echo.decision is not None
    assert echo.decision.rule_id == "toolset.definition_changed"
    assert (state.status.value, state.stop_reason.value) == ("stopped", "TOOL_DEFINITION_CHANGED")


async def test_two_servers_listing_the_same_tool_are_both_offered_under_names_of_the_operators(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, store: RunStore, name: str
) -> None:
    """Tool names are one namespace across toolsets: ``name:`` offers a server's tool under another."""
    import ray

    from tests.integration.toolset_servers import TOY

    servers = "".join(
        f"""\
  - name: toy-{side}
    transport: stdio
    command: {sys.executable}
    args: ["{TOY}"]
    timeouts: {{connect_s: 30, call_s: 10}}
    tools:
      {side}_echo: {{name: echo, scope: toy:read, risk: read_only}}
"""
        for side in ("left", "right")
    )
    toolsets = parse_toolsets(f"servers:\n{servers}", "two-toys.yaml", {})
    supervisor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets)
    plan = {
        "nodes": [
            {"id": "left", "tool": "left_echo", "args": {"text": "from the left"}},
            {"id": "right", "tool": "right_echo", "args": {"text": {"$ref": "left", "pointer": "/text"}}},
        ]
    }
    try:
        offered = await supervisor.contracts.remote()
        state = await run_to_end(supervisor, store, plan, planner="outputs")
    finally:
        ray.kill(supervisor)

    assert {name: offered[name].server for name in ("left_echo", "right_echo")} == {
        "left_echo": "toy-left",
        "right_echo": "toy-right",
    }
    assert "echo" not in offered
    assert (state.status.value, state.stop_reason) == ("completed", None)
    outputs = state.result["outputs"]  # type: ignore[index]
    assert outputs["right"]["text"] == "from the left"
    assert outputs["left"]["pid"] != outputs["right"]["pid"]  # each call ran on its own server's process


def _running(state: RunState, node_id: str) -> bool:
    node = state.nodes.get(node_id)
    return node is not None and node.status.value == "running"


def test_a_plan_whose_tools_bind_nothing_runs_over_http_without_a_resource(
    ray_cluster: None,
    scratch_dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported below
) -> None:
    """Issue 35, item 13: such a plan ran from the CLI, but the API required a resource (422 invalid-request)
    and refused any it was given (422 resource-mismatch: no tool uses the key)."""
    from actors.launch.settings import ApiKeyGrant

    key = "test-key-toy"
    config = api_config(scratch_dsn, tool_server.url, token_key, toolsets=toy_toolsets())
    config = dataclasses.replace(
        config, api_keys={key: ApiKeyGrant(tenant_id="tenant-demo", subject="toy", scopes=("toy:read",))}
    )
    plan = {"nodes": [{"id": "hi", "tool": "echo", "args": {"text": "hello"}}]}
    base = serve_api(config)
    with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        created = client.post("/runs", params={"wait": 30}, json={"plan": plan})
        named = client.post("/runs", json={"resource": {"case_id": "C-102"}, "plan": plan})
        planless = client.post("/runs", json={})

    assert created.status_code == 201, created.text
    run = created.json()
    assert (run["status"], run["resource"]) == ("completed", {}), run
    assert run["result"]["outputs"]["hi"]["text"] == "hello"
    # A resource no tool of the plan uses is still the requester's mistake, named as such.
    assert (named.status_code, named.json()["type"].rsplit("/", 1)[1]) == (422, "resource-mismatch")
    assert named.json()["unused"] == ["case_id"]
    # Without a plan, the toolsets name no planner to write one: said, not a 5xx.
    assert planless.status_code == 422, planless.text

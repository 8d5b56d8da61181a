"""A worked example over @modelcontextprotocol/server-filesystem (stdio), read-only tools only, as runs on the
supervisor: list a directory, then read every file it lists in parallel (``for_each``), the root bound to the
run's resource; a path outside that root is denied by raydag's policy, before the server sees it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.policy import Principal
from dag.run_state import RunState
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.toolset_servers import filesystem_toolsets

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"files:read"}))
READ_ONLY = """\
      search_files:
        scope: files:read
        risk: read_only
        run_bound: {path: {resource: root, match: path_within}}
        split_lines: [content]
      read_text_file:
        scope: files:read
        risk: read_only
        run_bound: {path: {resource: root, match: path_within}}
"""


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    """``reports/`` with three files, and beside it a file no run over ``reports/`` may read."""
    folder = tmp_path / "reports"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.txt").write_text(f"report {name}\n")
    (tmp_path / "outside.txt").write_text("not for this run\n")
    return folder


@pytest.fixture
def supervisor(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, reports: Path
) -> Iterator[Any]:
    import ray

    # The server may read all of tmp_path: what keeps a run inside reports/ is raydag's policy.
    toolsets = filesystem_toolsets(reports.parent, READ_ONLY)
    name = f"raydag-test-files-{uuid.uuid4().hex[:6]}"
    actor = supervisor_for(dsn, tool_server, token_key, name, toolsets=toolsets)
    yield actor
    ray.kill(actor)


async def run_to_end(supervisor: Any, store: RunStore, plan: dict[str, Any], root: Path) -> RunState:
    from actors.api.views import load_state

    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"root": str(root)}, plan=plan, planner="outputs")
    )
    assert submitted.outcome is Submission.CREATED, submitted
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    return await load_state(store, submitted.run_id)


async def test_a_dag_lists_the_run_root_and_reads_every_file_in_it_in_parallel(
    supervisor: Any, store: RunStore, reports: Path
) -> None:
    plan = {
        "nodes": [
            {"id": "list", "tool": "search_files", "args": {"path": str(reports), "pattern": "*.txt"}},
            {
                "id": "read",
                "tool": "read_text_file",
                "for_each": {"$ref": "list", "pointer": "/content_lines"},
                "args": {"path": {"$item": ""}},
            },
        ]
    }

    state = await run_to_end(supervisor, store, plan, reports)
    events = [stored.event for stored in await store.events(state.run_id)]

    assert (state.status.value, state.stop_reason) == ("completed", None)
    outputs = state.result["outputs"]  # type: ignore[index]
    listed = sorted(outputs["list"]["content_lines"])
    assert listed == [str(reports / f"{name}.txt") for name in ("a", "b", "c")]
    children = state.nodes["read"].children
    assert children is not None
    assert len(children) == 3
    read = {state.nodes[child].args["path"]: outputs[child] for child in children}  # type: ignore[index]
    assert read == {str(reports / f"{n}.txt"): {"content": f"report {n}\n"} for n in ("a", "b", "c")}
    # Every read was dispatched at once, before any of them had answered.
    kinds = [(event.kind, getattr(event, "node_id", None)) for event in events]
    dispatched = [kinds.index(("node_dispatched", child)) for child in children]
    answered = [kinds.index(("node_succeeded", child)) for child in children]
    assert max(dispatched) < min(answered)


async def test_a_path_outside_the_run_root_is_denied_before_the_server_sees_it(
    supervisor: Any, store: RunStore, reports: Path
) -> None:
    outside = reports.parent / "outside.txt"
    plan = {
        "nodes": [
            {"id": "inside", "tool": "read_text_file", "args": {"path": str(reports / "a.txt")}},
            {"id": "outside", "tool": "read_text_file", "args": {"path": str(outside)}},
            {"id": "climb", "tool": "read_text_file", "args": {"path": f"{reports}/../outside.txt"}},
        ]
    }

    state = await run_to_end(supervisor, store, plan, reports)
    ledger = {row["node_id"]: row for row in await store.ledger(state.run_id)}
    events = [stored.event for stored in await store.events(state.run_id)]

    assert state.nodes["inside"].status.value == "succeeded"
    for node_id in ("outside", "climb"):
        node = state.nodes[node_id]
        assert node.status.value == "denied"
        assert node.decision is not None
        assert node.decision.rule_id == "resource.root_bound"
        assert (ledger[node_id]["status"], ledger[node_id]["started_at"]) == ("denied", None)
    # Only the allowed call went to the server: a denied node is recorded, never dispatched.
    assert {event.node_id for event in events if event.kind == "node_dispatched"} == {"inside"}  # type: ignore[attr-defined]
    assert ledger["inside"]["status"] == "succeeded"
    assert state.status.value != "completed"

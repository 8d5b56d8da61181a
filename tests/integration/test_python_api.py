"""``import raydag``: the README's example, run as a user's script with its own ``ray.init()``."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import asyncpg

from tests.caseops import copy_case
from tests.conftest import REPO
from tests.integration.test_cli import environment
from tests.integration.toolset_servers import EVERYTHING, NODE, everything_server
from tests.processes import run_to_end


def readme_example() -> tuple[str, str]:
    """The README's Python example and the toolsets file it runs over, as written."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API\n") :]
    toolsets = re.search(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    script = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert toolsets is not None
    assert script is not None
    return script.group(1), toolsets.group(1)


def a_case_of_its_own(dsn: str) -> str:
    """A copy of C-103 for a script that sends its request: on the session's ledger, C-103's request is one intent,
    which another test may have sent already (docs/EFFECTS.md)."""
    return asyncio.run(copy_case(dsn))


def run_script(text: str, dsn: str, folder: Path, **variables: str) -> tuple[int, str, str]:
    """Run ``text`` as a user's script with its own Ray, in ``folder``: its exit code, stdout and stderr."""
    script = folder / "script.py"
    script.write_text(text)
    env = environment(folder / "home", RAYDAG_DATABASE_URL=dsn, RAY_ADDRESS="local", **variables)
    return run_to_end([sys.executable, str(script)], cwd=folder, env=env, timeout_s=300)


def test_the_readme_example_runs_a_plan_over_a_toolset_from_a_script_with_its_own_ray(
    dsn: str, tmp_path: Path
) -> None:
    """The README's script over the README's toolsets file, as written: only ``npx -y`` (which would fetch the
    server) is the pinned copy the tests install (``make node``)."""
    script, toolsets = readme_example()
    launcher = 'command: npx\n    args: ["-y", "@modelcontextprotocol/server-everything", "stdio"]'
    assert launcher in toolsets
    pinned = f'command: {NODE}\n    args: ["{EVERYTHING}", "stdio"]'
    (tmp_path / "toolsets.yaml").write_text(toolsets.replace(launcher, pinned))

    returncode, stdout, stderr = run_script(script, dsn, tmp_path)

    assert returncode == 0, stderr[-3000:]
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    printed = re.search(r"It prints `(.*?)`, then\n`(.*?)`", readme, flags=re.DOTALL)
    assert printed is not None
    assert stdout.splitlines()[:2] == [printed.group(1), printed.group(2)], stderr[-3000:]


def test_the_public_surface_is_reexported_from_one_place() -> None:
    import raydag
    from actors import python_api

    assert raydag.__all__ == python_api.__all__
    assert raydag.start is python_api.start
    assert raydag.Run.__module__ == "actors.python_api.session"


APPROVING_SCRIPT = """\
import json, os, time
import ray
import raydag

ray.init()
with raydag.start() as rd:
    run_id = rd.submit(resource={"case_id": os.environ["CASE_ID"]}, stage="act")
    deadline = time.monotonic() + 120
    while True:
        sends = [op for op in rd.operations(run_id) if op["tool"] == "caseops_send_document_request"]
        if sends and sends[0]["state"] == "awaiting_approval":
            break
        assert time.monotonic() < deadline, rd.operations(run_id)
        time.sleep(0.2)
    send = sends[0]
    refusals = []
    unknown_run = "00000000-0000-4000-8000-000000000000"
    for run, by, quoted in ((run_id, "approver", "0" * 64), (run_id, rd.subject, send["args_hash"]),
                            (unknown_run, "approver", send["args_hash"])):
        try:
            rd.approve(run, send["operation_id"], quoted, by=by)
        except raydag.DecisionRefused as refused:
            refusals.append([refused.kind, refused.code, refused.status])
    approved = rd.approve(run_id, send["operation_id"], send["args_hash"], by="approver", note="scripted")
    run = rd.wait(run_id, timeout_s=120)
    print(json.dumps({"refusals": refusals, "approved": approved["state"], "status": run.status,
                      "request": run.result["document_request"], "operation": send["operation_id"]}))
"""


def test_a_script_approves_a_runs_write_by_its_hash_and_the_run_sends_once(dsn: str, tmp_path: Path) -> None:
    returncode, stdout, stderr = run_script(APPROVING_SCRIPT, dsn, tmp_path, CASE_ID=a_case_of_its_own(dsn))

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    # One refusal type, as the API answers it: an unknown run is the same refusal as over HTTP.
    assert answer["refusals"] == [
        ["operation", "operation-hash-mismatch", 409],
        ["operation", "operation-self-approval", 403],
        ["operation", "run-not-found", 404],
    ]
    assert (answer["approved"], answer["status"]) == ("approved", "completed")
    assert asyncio.run(outbox_rows(dsn, answer["operation"])) == [answer["request"]["request_id"]]


SELF_APPROVING_SCRIPT = """\
import json, os, time
import ray
import raydag

ray.init()
with raydag.start() as rd:
    run_id = rd.submit(resource={"case_id": os.environ["CASE_ID"]}, stage="act")
    deadline = time.monotonic() + 120
    while not (sends := [op for op in rd.operations(run_id)
                         if op["tool"] == "caseops_send_document_request" and op["state"] == "awaiting_approval"]):
        assert time.monotonic() < deadline, rd.operations(run_id)
        time.sleep(0.2)
    approved = rd.approve(run_id, sends[0]["operation_id"], sends[0]["args_hash"], by=rd.subject)
    run = rd.wait(run_id, timeout_s=120)
    print(json.dumps({"approved": approved["state"], "by": approved["history"][-1]["actor"],
                      "status": run.status, "operation": sends[0]["operation_id"]}))
"""


def test_a_tenant_whose_policy_lets_requesters_approve_their_irreversible_writes_approves_from_a_script(
    dsn: str, tmp_path: Path
) -> None:
    policy = json.dumps({"tenant-demo": {"self_approval": ["irreversible_write"]}})
    returncode, stdout, stderr = run_script(
        SELF_APPROVING_SCRIPT, dsn, tmp_path, RAYDAG_TENANT_POLICY=policy, CASE_ID=a_case_of_its_own(dsn)
    )

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert (answer["approved"], answer["status"]) == ("approved", "completed"), answer
    assert answer["by"].startswith("person:tenant-demo/script:")  # the run's own principal said yes
    assert len(asyncio.run(outbox_rows(dsn, answer["operation"]))) == 1


REVIEWING_SCRIPT = """\
import json, time
import ray
import raydag

ray.init()
with raydag.start() as rd:
    run_id = rd.submit(resource={"case_id": "C-102"}, review=True)
    deadline = time.monotonic() + 120
    while not (waiting := [review for review in rd.reviews(run_id) if review["state"] == "awaiting"]):
        assert time.monotonic() < deadline, rd.reviews(run_id)
        time.sleep(0.2)
    review = waiting[0]
    before = rd.get(run_id).nodes
    refusals = []
    for by, quoted in (("reviewer", "0" * 64), (rd.subject, review["plan_hash"])):
        try:
            rd.approve_plan(run_id, review["round"], quoted, by=by)
        except raydag.DecisionRefused as refused:
            refusals.append(refused.refusal.value)
    approved = rd.approve_plan(run_id, review["round"], review["plan_hash"], by="reviewer", note="fine")
    run = rd.wait(run_id, timeout_s=120)
    print(json.dumps({"refusals": refusals, "approved": approved["state"], "by": approved["decided_by"],
                      "dispatched_before": [node["node_id"] for node in before if node["attempts"]],
                      "status": run.status}))
"""


def test_a_script_reviews_a_runs_plan_by_its_hash_before_anything_runs(dsn: str, tmp_path: Path) -> None:
    returncode, stdout, stderr = run_script(REVIEWING_SCRIPT, dsn, tmp_path)

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert answer["refusals"] == ["review-hash-mismatch", "review-self-approval"]
    assert answer["dispatched_before"] == []  # nothing ran while the plan waited
    assert (answer["approved"], answer["by"], answer["status"]) == (
        "approved",
        "person:tenant-demo/reviewer",
        "completed",
    )


ANSWERING_SCRIPT = """\
import json, time
import ray
import raydag

ray.init()
with raydag.start() as rd:
    run_id = rd.submit(resource={"case_id": "C-102"}, planner="asking")
    deadline = time.monotonic() + 120
    while not rd.questions(run_id):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    [asked] = rd.questions(run_id)
    answered = rd.answer(run_id, 1, "C-102", by="alice")
    try:
        rd.answer(run_id, 1, "C-999", by="mallory")
        again = None
    except raydag.DecisionRefused as refused:
        again = refused.refusal.value
    run = rd.wait(run_id, timeout_s=120)
    print(json.dumps({"asked": asked["question"], "by": answered["answered_by"], "again": again,
                      "status": run.status, "result": run.result}))
"""


def test_a_script_answers_a_planners_question_and_the_run_goes_on_with_it(dsn: str, tmp_path: Path) -> None:
    returncode, stdout, stderr = run_script(
        ANSWERING_SCRIPT, dsn, tmp_path, PYTHONPATH=str(REPO), RAYDAG_PLANNERS="tests.planners:AskingPlanner"
    )

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert (answer["asked"], answer["by"], answer["again"]) == (
        "Which case should I read?",
        "person:tenant-demo/alice",
        "question-already-answered",
    )
    assert (answer["status"], answer["result"]) == (
        "completed",
        {"read": ["case"], "told": ["person:tenant-demo/alice: C-102"]},
    )


async def outbox_rows(dsn: str, key: str) -> list[str]:
    """The requests caseops' outbox holds under ``key``: the effect, counted where it happens."""
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT request_id FROM document_request_outbox WHERE idempotency_key = $1", key
        )
        return [row["request_id"] for row in rows]
    finally:
        await connection.close()


CONTINUING_SCRIPT = """\
import json, os, time
import ray
import raydag

SEND = "caseops_send_document_request"


def awaiting_send(rd, run_id):
    deadline = time.monotonic() + 120
    waits = lambda op: op["tool"] == SEND and op["state"] == "awaiting_approval"
    while not (sends := [op for op in rd.operations(run_id) if waits(op)]):
        assert time.monotonic() < deadline, rd.operations(run_id)
        time.sleep(0.2)
    return sends[0]


ray.init()
with raydag.start() as rd:
    first = rd.submit(resource={"case_id": os.environ["CASE_ID"]}, stage="act")
    rejected = awaiting_send(rd, first)
    rd.reject(first, rejected["operation_id"], rejected["args_hash"], by="approver", note="not yet")
    stopped = rd.wait(first, timeout_s=120)
    second = rd.continue_run(first, answer="send it now")
    again = rd.continue_run(first, answer="send it now")
    send = awaiting_send(rd, second)
    rd.approve(second, send["operation_id"], send["args_hash"], by="approver")
    run = rd.wait(second, timeout_s=120)
    try:
        rd.continue_run(second)
        refused = None
    except raydag.RunRefused as error:
        refused = error.outcome.value
    print(json.dumps({"stopped": stopped.status, "same": again == second, "status": run.status,
                      "refused": refused, "rejected": rejected["operation_id"], "sent": send["operation_id"]}))
"""


def test_a_script_continues_a_run_a_person_stopped_and_the_write_is_sent_once(
    dsn: str, tmp_path: Path
) -> None:
    returncode, stdout, stderr = run_script(CONTINUING_SCRIPT, dsn, tmp_path, CASE_ID=a_case_of_its_own(dsn))

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert (answer["stopped"], answer["same"], answer["status"], answer["refused"]) == (
        "needs_human",
        True,
        "completed",
        "run_not_continuable",
    )
    assert asyncio.run(outbox_rows(dsn, answer["rejected"])) == []
    assert len(asyncio.run(outbox_rows(dsn, answer["sent"]))) == 1


FINDING_SCRIPT = """\
import json, os, time
import ray
import raydag

ray.init()
with raydag.start() as rd:
    about = {"case_id": os.environ["CASE_ID"]}
    run_id = rd.submit(resource=about, stage="act")
    deadline = time.monotonic() + 120
    while not [run for run in rd.runs(status=["waiting"], resource=about) if run["run_id"] == run_id]:
        assert time.monotonic() < deadline, rd.runs(resource=about)
        time.sleep(0.2)
    mine = [item for item in rd.inbox() if item["run_id"] == run_id]
    theirs = [item for item in rd.inbox(by="approver") if item["run_id"] == run_id]
    (send,) = [item for item in theirs if item["kind"] == "operation"]
    rd.approve(run_id, send["operation_id"], send["args_hash"], by="approver")
    run = rd.wait(run_id, timeout_s=120)
    try:
        rd.runs(status=["asleep"])
        unknown = None
    except ValueError as error:
        unknown = str(error)
    print(json.dumps({
        "mine": [item["decidable"] for item in mine], "theirs": [item["decidable"] for item in theirs],
        "tool": send["tool"], "status": run.status, "operation": send["operation_id"],
        "left": [item for item in rd.inbox(by="approver") if item["run_id"] == run_id],
        "completed": [run["run_id"] for run in rd.runs(status=["completed"], resource=about)],
        "run_id": run_id, "unknown": unknown,
    }))
"""


def test_a_script_finds_its_waiting_run_and_what_it_waits_for_and_decides_it_from_the_inbox(
    dsn: str, tmp_path: Path
) -> None:
    returncode, stdout, stderr = run_script(FINDING_SCRIPT, dsn, tmp_path, CASE_ID=a_case_of_its_own(dsn))

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert answer["mine"] == [False]  # the requester sees its run's send, and may not approve it
    assert answer["theirs"] == [True]
    assert answer["tool"] == "caseops_send_document_request"
    assert answer["status"] == "completed"
    assert answer["left"] == []
    assert answer["completed"] == [answer["run_id"]]
    assert "asleep" in answer["unknown"]
    assert len(asyncio.run(outbox_rows(dsn, answer["operation"]))) == 1


TOOL_QUESTION_SCRIPT = """\
import json, time
import ray
import raydag

ray.init()
with raydag.start("toolsets.yaml") as rd:
    plan = {"nodes": [{"id": "research", "tool": "simulate-research-query",
                       "args": {"topic": "a script's write", "ambiguous": True}}]}
    run_id = rd.submit(plan, stage="act")
    deadline = time.monotonic() + 120
    while not rd.tool_questions(run_id):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    [asked] = rd.tool_questions(run_id)
    try:
        rd.answer_tool(run_id, asked["question_id"], {"interpretation": 42}, by="alice")
        wrong = None
    except raydag.DecisionRefused as refused:
        wrong = refused.refusal.value
    answered = rd.answer_tool(run_id, asked["question_id"], {"interpretation": "current"}, by="alice")
    run = rd.wait(run_id, timeout_s=120)
    print(json.dumps({"asked": asked["message"], "wrong": wrong, "by": answered["decided_by"],
                      "status": run.status}))
"""
WRITING_RESEARCH = """\
servers:
  - name: everything
    transport: streamable-http
    url: {url}
    tools:
      simulate-research-query:
        scope: demo:write
        risk: reversible_write
        stages: [act]
        operation: {{approval: policy}}
"""


def test_a_script_answers_the_question_a_write_that_runs_as_a_task_asks(dsn: str, tmp_path: Path) -> None:
    """server-everything's research, a write by its hints, runs through its operation as a task and asks which
    interpretation is meant; the script answers as a person, and the server's report says so."""
    with everything_server(tmp_path / "everything.log") as server:
        (tmp_path / "toolsets.yaml").write_text(WRITING_RESEARCH.format(url=server.url))
        returncode, stdout, stderr = run_script(TOOL_QUESTION_SCRIPT, dsn, tmp_path)

    assert returncode == 0, stderr[-3000:]
    answer = json.loads(stdout.strip().splitlines()[-1])
    assert "a script's write" in answer["asked"]
    assert (answer["wrong"], answer["by"], answer["status"]) == (
        "tool-answer-invalid",
        "person:tenant-demo/alice",
        "completed",
    )

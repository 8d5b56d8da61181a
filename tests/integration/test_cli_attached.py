"""``raydag run --url``: a run made by a raydag already up, over its HTTP API (the session's Serve app), from
a command that could start nothing itself (its database setting points where nothing answers, and no Ray is
named): the report is the API's run, a refusal is the API's, and a run that waits for a person is followed
until a person decides it. The send is counted in caseops' outbox."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx

from tests.conftest import REPO
from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, auth
from tests.integration.test_cli import RAYDAG, environment, home_fixture
from tests.integration.test_cli_inbox import until_line
from tests.integration.test_operations import SEND, act_on_a_copy, decide, operations, sent
from tests.loopback import free_port

home = home_fixture("cli-attached")


def attached_env(home: Path) -> dict[str, str]:
    """An environment in which a cold ``raydag run`` could not start: its database is a port nothing answers."""
    return environment(home, RAYDAG_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/none")


def run_attached(
    home: Path, *args: str, command: str = "run", extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``raydag COMMAND ARGS`` in an environment where it could start nothing itself (and ``extra``)."""
    return subprocess.run(
        [RAYDAG, command, *args],
        env={**attached_env(home), **(extra or {})},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_run_is_made_by_the_raydag_that_is_up_and_printed_as_a_cold_one_is(
    api: str, client: httpx.Client, home: Path
) -> None:
    done = run_attached(home, "C-102", "--json", "--url", api, "--api-key", DEMO_KEY)

    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["run"]["status"] == "completed"
    assert report["run"]["result"]["outcome"] == "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"
    assert {"case", "policy", "docs"} <= {node["node_id"] for node in report["nodes"]}
    # The API's own run, of the key's tenant and subject.
    served = client.get(f"/runs/{report['run']['run_id']}", headers=auth(DEMO_KEY))
    assert served.status_code == 200
    assert served.json()["result"] == report["run"]["result"]


def test_a_plan_the_api_refuses_is_refused_in_its_words_and_nothing_runs(
    api: str, client: httpx.Client, home: Path
) -> None:
    plan = home / "plan.json"
    plan.write_text(json.dumps({"nodes": [{"id": "a", "tool": "caseops_no_such_tool", "args": {}}]}))
    before = client.get("/runs?limit=1", headers=auth(DEMO_KEY)).json()["items"]

    done = run_attached(home, "C-102", "--plan", str(plan), "--url", api, "--api-key", DEMO_KEY)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "UNKNOWN_TOOL" in done.stderr, done.stderr
    assert "caseops_no_such_tool" in done.stderr, done.stderr
    assert client.get("/runs?limit=1", headers=auth(DEMO_KEY)).json()["items"] == before


def test_a_run_that_waits_for_a_person_is_followed_until_one_decides(
    api: str, client: httpx.Client, dsn: str, home: Path
) -> None:
    case_id = act_on_a_copy(dsn)["case_id"]
    following = subprocess.Popen(
        [RAYDAG, "run", case_id, "--stage", "act", "--json", "--url", api, "--api-key", DEMO_KEY],
        env=attached_env(home),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert following.stderr is not None
        told = until_line(following, "waits for operation", stream=following.stderr)
        run_id = told[-1].split()[1]
        send = operations(client, run_id)[SEND]
        assert sent(dsn, send) == 0
        assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
        out, err = following.communicate(timeout=120)
    finally:
        following.kill()
        following.communicate()
    assert following.returncode == 0, (out, err)
    assert json.loads(out)["run"]["status"] == "completed"
    assert sent(dsn, send) == 1


def test_a_batch_is_run_by_the_raydag_that_is_up_and_an_unknown_case_is_a_row(
    api: str, client: httpx.Client, home: Path
) -> None:
    cases = home / "cases.txt"
    cases.write_text("C-101\nC-102\nC-999\n")
    report = home / "report.json"

    done = run_attached(
        home, str(cases), "--report", str(report), "--url", api, "--api-key", DEMO_KEY, command="batch"
    )

    assert done.returncode == 1, done.stdout + done.stderr  # a case not found fails the batch
    rows = {row["case_id"]: row for row in json.loads(report.read_text())["cases"]}
    assert {case: row["status"] for case, row in rows.items()} == {
        "C-101": "completed",
        "C-102": "completed",
        "C-999": "not_found",
    }
    for case in ("C-101", "C-102"):
        served = client.get(f"/runs/{rows[case]['run_id']}", headers=auth(DEMO_KEY)).json()
        assert served["resource"] == {"case_id": case}


def test_continue_without_url_is_made_by_the_raydag_serving_its_home(
    api: str, client: httpx.Client, home: Path
) -> None:
    import os

    from actors.launch.serving import Serving, recorded

    created = client.post("/runs?wait=30", json={"resource": {"case_id": "C-102"}}, headers=auth(DEMO_KEY))
    assert created.status_code == 201, created.text
    serving = Serving(url=api, pid=os.getpid(), toolsets=None, development_keys={"tenant-demo": DEMO_KEY})

    with recorded(home, serving):
        done = run_attached(home, created.json()["run_id"], command="continue")

    # Its refusal, in its words: a completed run is not continued (with no raydag found, the default URL
    # would not answer, exit 1).
    assert done.returncode == 2, done.stdout + done.stderr
    assert "run-not-continuable" in done.stderr, done.stderr
    assert f"made by the raydag at {api}" in done.stderr


def imported(stderr: str) -> tuple[set[str], str]:
    """The top-level packages a command imported, from ``-X importtime``'s lines on its stderr, and the rest of
    its stderr (what it said)."""
    modules, said = set(), []
    for line in stderr.splitlines():
        if line.startswith("import time:"):
            modules.add(line.rsplit("|", 1)[-1].strip().split(".")[0])
        else:
            said.append(line)
    return modules - {"cumulative"}, "\n".join(said)


def test_an_attached_run_loads_no_typer_rich_httpx_or_pydantic_and_says_what_it_said(
    api: str, home: Path
) -> None:
    def raydag(*args: str) -> subprocess.CompletedProcess[str]:
        return run_attached(
            home, *args, "--url", api, "--api-key", DEMO_KEY, extra={"PYTHONPROFILEIMPORTTIME": "1"}
        )

    done = raydag("C-102")

    modules, said = imported(done.stderr)
    assert done.returncode == 0, done.stdout + said
    assert "actors" in modules  # the profile is the command's
    assert not modules & {"typer", "click", "rich", "httpx", "pydantic"}, sorted(modules)
    assert "plan for C-102 (DAG)" in done.stdout
    assert "┃ node " in done.stdout
    assert "│ resolve " in done.stdout
    assert "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION" in done.stdout

    # Refusals keep their words and exit codes: the API's, the command's own, and typer's for what it reads.
    unknown = raydag("C-999")
    assert unknown.returncode == 2
    assert "Not Found (case-not-found): no case with this id was found" in imported(unknown.stderr)[1]
    pair = raydag("--resource", "no-equals")
    assert pair.returncode == 2
    assert "--resource 'no-equals': give each key once, as key=value" in imported(pair.stderr)[1]
    nameless = raydag()
    assert nameless.returncode == 2
    assert "name what the run is about" in imported(nameless.stderr)[1]
    bogus = raydag("C-102", "--bogus")
    assert bogus.returncode == 2
    assert "No such option: --bogus" in imported(bogus.stderr)[1]
    missing = raydag("C-102", "--plan", str(home / "no-such-plan.json"))
    assert missing.returncode == 2
    assert "does not exist" in imported(missing.stderr)[1]
    dashed = raydag("C-102", "--goal", "-x", "--json")  # a value like an option: read by typer, as before
    assert dashed.returncode == 0, imported(dashed.stderr)[1]
    assert json.loads(dashed.stdout)["run"]["goal"] == "-x"

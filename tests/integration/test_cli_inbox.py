"""Finding and deciding what waits from a terminal, over the real API, supervisor, PostgreSQL and caseops
server: ``raydag runs`` lists the waiting run, ``raydag inbox`` shows its send whole with the command that
decides it, that command (copied as printed) approves it, and ``raydag watch``, started before, follows the
run live to its end. The send is counted in caseops' outbox."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx

from tests.integration.conftest import APPROVER_KEY, DEMO_KEY, REPO, auth, raydag_cli
from tests.integration.test_operations import act_on_a_copy, sent, waiting_send
from tests.loopback import free_port


def watching(run_id: str, url: str, key: str) -> subprocess.Popen[str]:
    """``raydag watch RUN`` started as a person starts it, left to follow the run."""
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "raydag"), "watch", run_id, "--url", url, "--api-key", key],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def until_line(process: subprocess.Popen[str], wanted: str, stream: IO[str] | None = None) -> list[str]:
    """The lines ``process`` printed (to ``stream``: its stdout unless named) up to the first that holds
    ``wanted``; the test fails if the stream ends first."""
    stream = stream or process.stdout
    assert stream is not None
    lines: list[str] = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if wanted in line:
            return lines
    raise AssertionError(f"never printed {wanted!r}: {lines}")


def test_a_person_finds_the_waiting_send_in_the_inbox_decides_it_as_printed_and_watches_it_sent_once(
    api: str, client: httpx.Client, dsn: str
) -> None:
    resource = act_on_a_copy(dsn)
    run_id, send = waiting_send(client, resource)
    watch = watching(run_id, api, DEMO_KEY)
    try:
        listed = raydag_cli(
            "runs", "--status", "waiting", "--case-id", resource["case_id"], url=api, key=DEMO_KEY
        )
        assert listed.returncode == 0, listed.stderr
        assert run_id in listed.stdout, listed.stdout
        assert "waiting" in listed.stdout, listed.stdout

        # The requester sees the send but may not decide it; the approver is shown the command that does.
        mine = raydag_cli("inbox", "--run", run_id, url=api, key=DEMO_KEY)
        assert mine.returncode == 0, mine.stderr
        assert send["operation_id"] in mine.stdout, mine.stdout
        assert "not yours to decide" in mine.stdout, mine.stdout
        theirs = raydag_cli("inbox", "--run", run_id, url=api, key=APPROVER_KEY)
        assert theirs.returncode == 0, theirs.stderr
        assert send["args_hash"] in theirs.stdout, theirs.stdout
        assert send["tool"] in theirs.stdout, theirs.stdout
        (approve,) = [line for line in theirs.stdout.splitlines() if "raydag approvals approve" in line]
        command = shlex.split(approve.split("$", 1)[1])
        assert command[:3] == ["raydag", "approvals", "approve"], approve
        assert command[3:] == [run_id, send["operation_id"], "--hash", send["args_hash"]], approve
        assert sent(dsn, send) == 0  # nothing is sent before a person says yes

        followed = until_line(watch, f"waits for operation {send['operation_id']}")
        approved = raydag_cli(*command[1:], url=api, key=APPROVER_KEY)
        assert approved.returncode == 0, approved.stderr

        out, err = watch.communicate(timeout=120)
    finally:
        watch.kill()
        watch.communicate()
    assert watch.returncode == 0, (followed, out, err)
    lines = [*followed, *out.splitlines()]
    assert any(line.endswith(f"{send['node_id']}  {send['tool']} started") for line in lines), lines
    assert lines[-1].endswith("run completed"), lines
    assert sent(dsn, send) == 1

    after = raydag_cli("inbox", "--run", run_id, url=api, key=APPROVER_KEY)
    assert after.stdout.strip() == "nothing waits for a person", after.stdout
    done = raydag_cli(
        "runs", "--status", "completed", "--case-id", resource["case_id"], url=api, key=DEMO_KEY
    )
    assert run_id in done.stdout, done.stdout


def test_listing_pages_through_runs_with_a_cursor_it_prints(api: str, client: httpx.Client, dsn: str) -> None:
    case_id = act_on_a_copy(dsn)["case_id"]
    created = []
    for _ in range(2):
        answer = client.post("/runs", json={"case_id": case_id}, headers=auth(DEMO_KEY))
        assert answer.status_code == 201, answer.text
        created.append(answer.json()["run_id"])
    first = raydag_cli("runs", "--case-id", case_id, "--limit", "1", url=api, key=DEMO_KEY)
    assert first.returncode == 0, first.stderr
    assert created[1] in first.stdout, first.stdout  # newest first
    assert created[0] not in first.stdout, first.stdout
    (more,) = [line for line in first.stdout.splitlines() if line.startswith("more: ")]
    second = raydag_cli(*shlex.split(more.removeprefix("more: "))[1:], url=api, key=DEMO_KEY)
    assert created[0] in second.stdout, second.stdout
    assert created[1] not in second.stdout, second.stdout
    assert "more: " not in second.stdout, second.stdout


def test_what_the_api_refuses_is_named_and_nothing_is_followed(api: str) -> None:
    kind = raydag_cli("inbox", "--kind", "payment", url=api, key=DEMO_KEY)
    assert kind.returncode == 2, (kind.stdout, kind.stderr)
    assert "kind" in kind.stderr, (kind.stdout, kind.stderr)
    status = raydag_cli("runs", "--status", "asleep", url=api, key=DEMO_KEY)
    assert status.returncode == 2, (status.stdout, status.stderr)
    assert "status" in status.stderr, (status.stdout, status.stderr)
    unknown = raydag_cli("watch", "0b9f6c2e-6f7e-4d7b-9d43-0d7c1b0e8a11", url=api, key=DEMO_KEY)
    assert unknown.returncode == 2, (unknown.stdout, unknown.stderr)
    assert "not found" in unknown.stderr.lower(), (unknown.stdout, unknown.stderr)
    unreachable = raydag_cli("runs", url=f"http://127.0.0.1:{free_port()}", key=DEMO_KEY)
    assert unreachable.returncode == 1, unreachable.stderr
    assert "cannot reach" in unreachable.stderr, unreachable.stderr

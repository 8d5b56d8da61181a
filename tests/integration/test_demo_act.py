"""``raydag demo --act``, as a person at a terminal runs it, over a database of the test's own: the write is
shown whole and waits for the person's answer; yes sends it once, no never, and no answer leaves it waiting.
Sends are counted in caseops' outbox, where the effect happens."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncpg

from tests.conftest import REPO
from tests.integration.test_cli import RAYDAG, environment, home_fixture

home = home_fixture("demo-act")


def demo_act(dsn: str, home: Path, answer: str) -> subprocess.CompletedProcess[str]:
    """``raydag demo --act`` over ``dsn``, ``answer`` typed at its prompt."""
    return subprocess.run(
        [RAYDAG, "demo", "--act"],
        input=answer,
        env=environment(home, RAYDAG_DATABASE_URL=dsn),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def requests_sent(dsn: str) -> int:
    """Document requests in caseops' outbox for C-103: the effect, counted at the tool's side."""

    async def count() -> int:
        connection = await asyncpg.connect(dsn)
        try:
            sent: int = await connection.fetchval(
                "SELECT count(*) FROM document_request_outbox WHERE case_id = 'C-103'"
            )
            return sent
        finally:
            await connection.close()

    return asyncio.run(count())


def test_yes_at_the_terminal_sends_the_request_once_and_a_second_demo_joins_it(
    scratch_dsn: str, home: Path
) -> None:
    before = requests_sent(scratch_dsn)

    first = demo_act(scratch_dsn, home, "y\n")

    assert first.returncode == 0, first.stdout + first.stderr
    assert "the run waits for a person to approve a write" in first.stdout, first.stdout
    assert "caseops_send_document_request" in first.stdout
    assert "approve it as dev-approver? [y/N]" in first.stdout
    assert (
        "send_document_request: succeeded, decided by person:tenant-demo/dev-approver, executed 1 time"
        in (first.stdout)
    )
    assert requests_sent(scratch_dsn) == before + 1

    # The same intent again: nothing to approve, nothing sent again; the run reads the first send's outcome.
    second = demo_act(scratch_dsn, home, "")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "approve it as" not in second.stdout
    assert "(one intent, shared by 2 runs)" in second.stdout, second.stdout
    assert requests_sent(scratch_dsn) == before + 1


def test_no_never_sends_and_no_answer_leaves_the_write_waiting(scratch_dsn: str, home: Path) -> None:
    before = requests_sent(scratch_dsn)

    unanswered = demo_act(scratch_dsn, home, "")
    assert unanswered.returncode == 3, unanswered.stdout + unanswered.stderr
    assert "no answer: the write still waits for a person" in unanswered.stdout

    rejected = demo_act(scratch_dsn, home, "n\n")
    assert "send_document_request: rejected, decided by person:tenant-demo/dev-approver" in rejected.stdout, (
        rejected.stdout + rejected.stderr
    )
    assert requests_sent(scratch_dsn) == before

"""``python -m bench --smoke`` as a test runs it: in a process session of its own, so that nothing of it
(the benchmarks' Ray, their servers) outlives the run, whether it ends, hangs or the session is stopped."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.processes import Session

SMOKE_LIMIT_S = 900
"""Only a guard against a hung benchmark. Measured on this 2-core machine: 122 s for all fourteen with little
else running, 163 s in one of ``make test``'s two workers while the other ran the rest of the suite; there are
twenty-four now (the sub-agents' and the CLI's cold arm among them), and on a machine loaded four times over
they ran past 600 s without hanging."""


@dataclass(frozen=True)
class SmokeResult:
    returncode: int
    stdout: str
    stderr: str


def run_smoke(admin_dsn: str, folder: Path) -> SmokeResult:
    """Every benchmark in smoke mode, each on a database of its own on the server ``admin_dsn`` names; its
    output is kept in ``folder``. Past ``SMOKE_LIMIT_S`` it is stopped and the test fails."""
    folder.mkdir(parents=True, exist_ok=True)
    out, err = folder / "stdout.log", folder / "stderr.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))}
    env.update(RAYDAG_DATABASE_URL=admin_dsn, RAY_USAGE_STATS_ENABLED="0")
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench", "--smoke"],
            cwd=REPO,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    session = Session(process)
    try:
        returncode = process.wait(timeout=SMOKE_LIMIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"python -m bench --smoke still ran after {SMOKE_LIMIT_S} s; its output: {out}, {err}"
        ) from None
    finally:
        session.look()
        session.kill()  # what it started and left behind, or all of it when it hung or the test was stopped
        if process.poll() is None:
            process.wait(timeout=30)
    return SmokeResult(returncode, out.read_text(errors="replace"), err.read_text(errors="replace"))

"""``python -m bench --smoke`` in the background of the test session.

The smoke run takes about two minutes, nearly all of it waiting: for servers to boot, for tools that sleep.
Run in ``test_bench_smoke``'s own fixture, the rest of the suite queued behind it; started with the session's
first integration test instead (``conftest.bench_smoke``), it overlaps the suite, and its tests, which run
last, only read what it printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.processes import Session

SMOKE_LIMIT_S = 900
"""Only a guard against a hung benchmark, counted from the start. Measured on this 2-core machine: 122 s for
all fourteen alone, under four minutes beside the rest of the suite."""


@dataclass(frozen=True)
class SmokeResult:
    returncode: int
    stdout: str
    stderr: str


class SmokeRun:
    """Every benchmark in smoke mode, in a process session of its own (the benchmarks' Ray and servers
    keep it), each benchmark on a database of its own on the server ``admin_dsn`` names."""

    def __init__(self, admin_dsn: str, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._stdout = folder / "stdout.log"
        self._stderr = folder / "stderr.log"
        env = {
            key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))
        }
        env.update(RAYDAG_DATABASE_URL=admin_dsn, RAY_USAGE_STATS_ENABLED="0")
        with self._stdout.open("wb") as stdout, self._stderr.open("wb") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "bench", "--smoke"],
                cwd=REPO,
                env=env,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        self._started = time.monotonic()
        self._session = Session(self._process)

    def result(self) -> SmokeResult:
        """Wait for the run to end; past ``SMOKE_LIMIT_S`` from its start, stop it and fail."""
        remaining = SMOKE_LIMIT_S - (time.monotonic() - self._started)
        try:
            returncode = self._process.wait(timeout=max(0.0, remaining))
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"python -m bench --smoke still ran {SMOKE_LIMIT_S} s after it started; "
                f"its output: {self._stdout}, {self._stderr}"
            ) from None
        return SmokeResult(
            returncode,
            self._stdout.read_text(errors="replace"),
            self._stderr.read_text(errors="replace"),
        )

    def stop(self) -> None:
        """Kill whatever of the run is left (the session ended first, or it hung): nothing outlives it."""
        self._session.look()
        self._session.kill()
        if self._process.poll() is None:
            self._process.wait(timeout=30)

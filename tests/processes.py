"""The processes a command under test starts, followed while it runs, so a test can show none outlives it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil


class Session:
    """Every process in the session of ``process`` (started with ``start_new_session=True``): the command and
    all it starts (Ray's raylet, GCS, agents and workers keep the session; the embedded PostgreSQL does not,
    see ``postmaster``). ``look`` adds those alive now; call it while the command works."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.sid = process.pid
        self.seen: dict[int, psutil.Process] = {}
        self.look()

    def look(self) -> int:
        """Record the session's processes alive now; return how many have been seen in all."""
        for candidate in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
                if os.getsid(candidate.pid) == self.sid:
                    self.seen.setdefault(candidate.pid, candidate)
        return len(self.seen)

    def alive(self) -> list[str]:
        """``"pid name"`` of the processes seen that still run."""
        return [f"{process.pid} {process.name()}" for process in self.seen.values() if runs(process)]

    def kill(self) -> None:
        """SIGKILL whatever is left, so that a failing test leaves nothing behind either."""
        for process in self.seen.values():
            with contextlib.suppress(psutil.Error):
                process.kill()


def runs(process: psutil.Process) -> bool:
    """Whether ``process`` still runs: a zombie has ended (only its exit status waits for its parent)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def postmaster(pgdata: Path) -> psutil.Process | None:
    """The embedded PostgreSQL serving ``pgdata``, from its ``postmaster.pid``; ``None`` if none runs."""
    with contextlib.suppress(FileNotFoundError, ValueError, psutil.Error):
        process = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))
        if runs(process):
            return process
    return None


def wait_for(predicate: Callable[[], object], *, within_s: float, what: str, poll_s: float = 0.1) -> None:
    """Poll ``predicate()`` until it is true; fail naming ``what`` after ``within_s``."""
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {within_s:g} s"
        time.sleep(poll_s)


STOP_S = 120
"""How long a command under test may take to stop: the grace for calls in flight, Serve's drain, Ray's and
PostgreSQL's stop, on a busy machine."""


@dataclass
class Started:
    """A command under test, started by ``started``."""

    process: subprocess.Popen[bytes]
    session: Session
    log: Path
    leftovers: list[str] = field(default_factory=list)
    """After ``stop``: the processes of its session that outlived it."""

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        """Send ``signum``; return the exit code once the command has exited; record what outlived it."""
        self.session.look()
        self.process.send_signal(signum)
        code = self.process.wait(timeout=STOP_S)
        self.leftovers = self.session.alive()
        return code


@contextmanager
def started(command: list[str], *, env: dict[str, str], cwd: Path, log: Path) -> Iterator[Started]:
    """``command`` in a process session of its own, its output in ``log``; on the way out whatever is left of
    it is killed, so that a failing test leaves nothing behind either."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    running = Started(process, Session(process), log)
    try:
        yield running
    finally:
        running.session.look()
        running.session.kill()
        if process.poll() is None:
            process.wait(timeout=30)


def nothing_listens(port: int) -> bool:
    """Whether a connection to ``127.0.0.1:port`` is refused."""
    with socket.socket() as client:
        return client.connect_ex(("127.0.0.1", port)) != 0


def run_to_end(
    command: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float
) -> tuple[int, str, str]:
    """``command`` in a process session of its own until it exits: its exit code, stdout and stderr. Whatever of
    its session is left afterwards (a Ray it started outlives it for a while) is killed."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    return process.returncode, stdout, stderr


def program_findings(
    program: Path, spec: dict[str, Any], *, cwd: Path, env: dict[str, str], timeout_s: float
) -> tuple[dict[str, Any], str]:
    """What a test's program (``python PROGRAM SPEC-AS-JSON``, in a session of its own: ``run_to_end``) found, as
    the one JSON object it prints last, and the end of its stderr. Fails, showing its stderr, if it failed."""
    returncode, stdout, stderr = run_to_end(
        [sys.executable, str(program), json.dumps(spec)], cwd=cwd, env=env, timeout_s=timeout_s
    )
    lines = stdout.strip().splitlines()
    assert returncode == 0, stderr[-6000:]
    assert lines, stderr[-6000:]
    found: dict[str, Any] = json.loads(lines[-1])
    return found, stderr[-4000:]

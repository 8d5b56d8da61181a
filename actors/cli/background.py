"""``raydag up`` and ``raydag down``: a raydag serving this home in the background, for the commands on it.

``up`` starts ``raydag serve`` as a process of its own (its own session: closing the terminal does not stop
it), its output in ``RAYDAG_HOME/serve.log``, and returns once its API answers. ``raydag run``, ``batch``,
``continue`` and the Python API's ``raydag.start()`` then make their runs through it (``actors.launch.serving``).
``down`` stops it as Ctrl-C stops ``raydag serve``: SIGTERM, its runs handed over, everything it started stopped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from actors.cli.report import console_for

console = console_for()
errors = console_for(stderr=True)

UP_WITHIN_S = 180.0
"""How long ``up`` waits for the API to answer (Ray, PostgreSQL and Serve start in ~15–30 s on two cores)."""
LOG_FILE = "serve.log"


def up(
    within_s: Annotated[
        float, typer.Option("--within", min=1, help="Seconds to wait for the API to answer.")
    ] = UP_WITHIN_S,
) -> None:
    """Start a raydag serving this RAYDAG_HOME in the background (raydag serve, with this environment's
    settings); raydag run and batch then make their runs through it. raydag down stops it."""
    from actors.launch.serving import answers, home_in, recorded_in  # here: not every command's start

    home = home_in(os.environ)
    serving = recorded_in(home)
    if serving is not None and answers(serving.url):
        console.print(f"a raydag serves {escape(str(home))} already, at {escape(serving.url)}")
        return
    home.mkdir(parents=True, exist_ok=True)
    log = home / LOG_FILE
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "-c", "from actors.cli.main import main; main()", "serve"],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not stopped with this terminal's process group
        )
    try:
        _wait_until_up(process, home, within_s)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while it starts: what this command started is stopped
        errors.print("interrupted: stopping the raydag it was starting")
        _stop(process.pid, grace_s=60)
        raise typer.Exit(130) from None


def _wait_until_up(process: subprocess.Popen[bytes], home: Path, within_s: float) -> None:
    from actors.launch.serving import answers, recorded_in

    log = home / LOG_FILE
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors.print(f"[red]raydag serve stopped as it started[/red] (exit {process.returncode}):")
            errors.print(escape(_tail(log)), soft_wrap=True)
            raise typer.Exit(1)
        serving = recorded_in(home)
        if serving is not None and serving.pid == process.pid and answers(serving.url):
            console.print(
                f"raydag serves {escape(str(home))} at {escape(serving.url)} (pid {process.pid}, "
                f"log {escape(str(log))}); raydag down stops it"
            )
            return
        time.sleep(0.25)
    errors.print(f"[red]raydag serve did not answer within {within_s:g} s[/red]; stopping it (log {log})")
    _stop(process.pid, grace_s=60)
    raise typer.Exit(1)


def down(
    within_s: Annotated[
        float, typer.Option("--within", min=1, help="Seconds to wait for it to stop.")
    ] = 120.0,
) -> None:
    """Stop the raydag serving this RAYDAG_HOME (raydag up, or a raydag serve): its runs are handed over and go
    on at the next start, and everything it started stops."""
    from actors.launch.serving import home_in, recorded_in

    home = home_in(os.environ)
    serving = recorded_in(home)
    if serving is None or not _serves(serving.pid):
        console.print(f"no raydag serves {escape(str(home))}")
        return
    if not _stop(serving.pid, grace_s=within_s):
        errors.print(f"[red]raydag serve (pid {serving.pid}) did not stop within {within_s:g} s[/red]")
        raise typer.Exit(1)
    console.print(f"stopped the raydag at {escape(serving.url)} (pid {serving.pid})")


def _serves(pid: int) -> bool:
    """Whether ``pid`` is a ``raydag serve`` (a record a killed one left may name a pid reused since)."""
    import psutil

    try:
        return "serve" in psutil.Process(pid).cmdline()
    except psutil.Error:
        return False


def _stop(pid: int, *, grace_s: float) -> bool:
    """SIGTERM to ``pid``, then wait up to ``grace_s`` for it to exit; whether it did."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.2)
    return False


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: a child of this process that exited is reaped here, not left a zombie."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours: another command started it
        import psutil

        return psutil.pid_exists(pid)
    return finished == 0


def _tail(path: os.PathLike[str], lines: int = 20) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return "".join(file.readlines()[-lines:])
    except OSError:
        return ""

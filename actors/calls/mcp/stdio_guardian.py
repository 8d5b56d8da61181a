"""Runs one stdio MCP server so that it cannot outlive the process that started it.

``python actors/calls/mcp/stdio_guardian.py COMMAND [ARGS...]``, started by ``actors.calls.mcp.stdio`` in a
process group of its own (the MCP SDK starts every stdio server in a new session). It first closes every
descriptor it inherited but its stdin, stdout and stderr: uvloop, the event loop Ray gives an actor, lets a child
inherit the caller's, the other ends of its own pipes among them, and a copy of the server's stdout held here would
hide the end of it from the caller. It starts COMMAND with its own stdin, stdout and stderr, writes one line naming
both pids to stderr, and waits. It ends the server's whole process
group when its parent dies (``PR_SET_PDEATHSIG`` on Linux, and a check of its parent every half second
elsewhere) or when it is told to stop, and exits with the server's code when the server exits. A Ray actor
killed with SIGKILL runs no clean-up of its own: this is what stops its servers then.

Standard library only, and run by path: it must start fast and import nothing of raydag.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
GRACE_S = 2.0
BANNER = "raydag-stdio-guardian"


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        # Where it cannot be armed, the parent check in ``main`` still ends the server, half a second later.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _close_inherited() -> None:
    """Close every descriptor but stdin, stdout and stderr."""
    limit = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, limit if limit > 3 else 1 << 16)


def _stop_group(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the whole group (the server and anything it started), SIGKILL after the grace period."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=GRACE_S)
    os.killpg(group, signal.SIGKILL)  # ends this guardian too, and whatever the server left behind


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(f"{BANNER}: no command to run\n")
        return 2
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    _close_inherited()
    try:
        server = subprocess.Popen(argv)
    except OSError as exc:
        sys.stderr.write(f"{BANNER}: cannot start {argv[0]!r}: {exc.strerror}\n")
        return 127
    # Only the server talks MCP: this process lets go of the pipes, so the server alone holds them.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.stderr.write(f"{BANNER}: pid={os.getpid()} server={server.pid}\n")
    sys.stderr.flush()

    def stop(_signum: int, _frame: object) -> None:
        _stop_group(server)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            code = server.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                _stop_group(server)
                return 1
            continue
        _stop_group_leftovers()
        return code if code >= 0 else 128 - code


def _stop_group_leftovers() -> None:
    """The server exited: end anything it started in the group, except this guardian, which exits next."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

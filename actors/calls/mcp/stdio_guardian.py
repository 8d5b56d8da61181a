"""Runs one stdio MCP server so that neither it nor anything it starts can outlive the process that started it.

``python actors/calls/mcp/stdio_guardian.py COMMAND [ARGS...]``, started by ``actors.calls.mcp.stdio`` in a
process group of its own (a new session, as the MCP SDK starts every stdio server). It first closes every
descriptor it inherited but its stdin, stdout and stderr: uvloop, the event loop Ray gives an actor, lets a child
inherit the caller's, the other ends of its own pipes among them, and a copy of the server's stdout held here would
hide the end of it from the caller. It starts COMMAND with its stdin, stdout and stderr, lets go of its own stdin
and stdout, writes one line naming both pids to stderr, and waits; it exits with the server's code when the server
exits, after a SIGTERM to what the server left behind in the group (the caller then ends what is left of it).

The kernel ends the whole group when the caller's process dies, however it dies (Linux; elsewhere the guardian
and the sweeper check their parent every half second):

- the guardian's parent-death signal (SIGTERM) makes it stop the group: SIGTERM, then SIGKILL after a grace
  period, as when it is told to stop;
- the guardian itself may be killed first (Ray kills a worker's children with SIGKILL as the worker exits): the
  server's own parent-death signal (SIGKILL) then ends the server, and the **sweeper**, a child of the guardian
  that only waits for the guardian's death (its parent-death signal), kills the rest of the group with SIGKILL.

Standard library only, and run by path: it must start fast and import nothing of raydag.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
GRACE_S = 2.0
PARENT_CHECK_S = 0.5
SWEEP = signal.SIGUSR1
"""The sweeper's parent-death signal: one nothing else sends to the group (a SIGTERM to the group is a stop,
which the guardian grants its grace period)."""
BANNER = "raydag-stdio-guardian"
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
"""Loaded before any fork: a child arms its parent-death signal without loading anything."""


def _die_with_parent(signum: int) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies; ``False`` where it cannot."""
    if _LIBC is None:
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(_LIBC.prctl(PR_SET_PDEATHSIG, signum) == 0)
    return False


def _close_inherited() -> None:
    """Close every descriptor but stdin, stdout and stderr."""
    limit = os.sysconf("SC_OPEN_MAX")
    os.closerange(3, limit if limit > 3 else 1 << 16)


def _to_devnull(*descriptors: int) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    for descriptor in descriptors:
        os.dup2(devnull, descriptor)
    os.close(devnull)


def _start_sweeper() -> int:
    """Fork the sweeper, which waits for this guardian's death, however it comes, then kills the group; its pid."""
    guardian = os.getpid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {SWEEP})  # inherited blocked: the sweeper waits for it
    sweeper = os.fork()
    if sweeper:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {SWEEP})
        return sweeper
    try:
        _to_devnull(0, 1, 2)  # holding no pipe of the server's
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, signal.SIG_IGN)  # a stop is the guardian's to make, with its grace period
        if _die_with_parent(SWEEP):
            if os.getppid() == guardian:
                signal.sigwait({SWEEP})
        else:
            while os.getppid() == guardian:
                time.sleep(PARENT_CHECK_S)
        os.killpg(0, signal.SIGKILL)
    finally:
        os._exit(0)


def _server_dies_with(guardian: int) -> Callable[[], None]:
    """The server's ``preexec_fn``: SIGKILL from the kernel when this guardian dies."""

    def arm() -> None:
        _die_with_parent(signal.SIGKILL)
        if os.getppid() != guardian:  # it died before the signal was armed
            os._exit(1)

    return arm


def _end_sweeper(sweeper: int) -> None:
    """Kill and reap the sweeper: a guardian that ends by its own choice leaves no zombie to anyone else."""
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(sweeper, signal.SIGKILL)
        os.waitpid(sweeper, 0)


def _stop_group(server: subprocess.Popen[bytes], sweeper: int) -> None:
    """SIGTERM to the whole group (the server and anything it started), SIGKILL after the grace period."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=GRACE_S)
    _end_sweeper(sweeper)
    os.killpg(group, signal.SIGKILL)  # this guardian too, and whatever the server left behind


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write(f"{BANNER}: no command to run\n")
        return 2
    parent = os.getppid()
    _die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 1
    _close_inherited()
    sweeper = _start_sweeper()
    try:
        # preexec_fn is safe here: this process has one thread.
        server = subprocess.Popen(argv, preexec_fn=_server_dies_with(os.getpid()))
    except OSError as exc:
        sys.stderr.write(f"{BANNER}: cannot start {argv[0]!r}: {exc.strerror}\n")
        _end_sweeper(sweeper)
        return 127
    # Only the server talks MCP: this process lets go of the pipes, so the server alone holds them.
    _to_devnull(0, 1)
    sys.stderr.write(f"{BANNER}: pid={os.getpid()} server={server.pid}\n")
    sys.stderr.flush()

    def stop(_signum: int, _frame: object) -> None:
        _stop_group(server, sweeper)
        sys.exit(143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        try:
            code = server.wait(timeout=PARENT_CHECK_S)
        except subprocess.TimeoutExpired:
            if os.getppid() != parent:
                _stop_group(server, sweeper)
                return 1
            continue
        _stop_group_leftovers()
        _end_sweeper(sweeper)
        return code if code >= 0 else 128 - code


def _stop_group_leftovers() -> None:
    """The server exited: SIGTERM to anything it started in the group (this guardian ignores it, and exits
    next; the caller ends what is left of the group after it)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

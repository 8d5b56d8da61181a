"""A stdio server that loses its stdout mid-call costs its own nodes one attempt. The guardian alone, started as a
caller's event loop starts it: a server that closes its stdout ends it for the caller, whatever descriptors the
guardian inherited.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import actors.calls.mcp.stdio_guardian

GUARDIAN = Path(actors.calls.mcp.stdio_guardian.__file__)


def guarded(
    server: str, *, extra_fds: tuple[int, ...] = (), stdout: int | None = None
) -> subprocess.Popen[bytes]:
    """The guardian running ``python -c server``, in a session of its own as ``stdio_transport`` starts it;
    ``extra_fds`` inherited besides its stdio, as uvloop (Ray's event loop) lets a child inherit them."""
    return subprocess.Popen(
        [sys.executable, "-I", str(GUARDIAN), sys.executable, "-c", server],
        stdin=subprocess.PIPE,
        stdout=stdout if stdout is not None else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=extra_fds,
        start_new_session=True,
    )


def test_a_server_closing_its_stdout_ends_it_for_the_caller_whatever_the_guardian_inherited() -> None:
    read_end, write_end = os.pipe()
    with guarded(
        "import os, time; os.close(1); time.sleep(600)", extra_fds=(write_end,), stdout=write_end
    ) as guardian:
        os.close(write_end)
        try:
            readable, _, _ = select.select([read_end], [], [], 30)
            assert readable, "the server's stdout did not end: someone else holds it"
            assert os.read(read_end, 1) == b""
        finally:
            os.close(read_end)
            os.killpg(guardian.pid, signal.SIGTERM)

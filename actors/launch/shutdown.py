"""Stopping on SIGTERM as on Ctrl-C, and leaving no process behind.

Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread is; SIGTERM, in a Ray driver, reaches Ray's C++
handler, which logs ``*** SIGTERM received ***`` and aborts (exit 134) without running any cleanup: the
embedded PostgreSQL and Ray's agents outlive it. ``catch_stop_signals`` makes both signals raise
``Interrupted`` in the main thread, once, so that every ``with`` block unwinds in order; a signal that comes
while the program is already stopping is reported and otherwise ignored (each step of a stop is bounded).

Ray's own processes (raylet, GCS, agents, workers) are descendants of the driver that started a local Ray.
``become_subreaper`` keeps those orphaned by the raylet's exit as this process's children, so that
``stop_descendants`` finds every one of them after ``ray.shutdown()``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
KEEP_RUNNING = frozenset({"postgres", "pg_ctl"})
"""Descendants ``stop_descendants`` leaves alone: the embedded PostgreSQL is stopped through ``pg_ctl`` by
whoever started it (``actors.store.database``), never by a signal from here."""


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread by the first SIGINT or SIGTERM; ``signum`` says which. Catch
    ``KeyboardInterrupt`` and pass it to ``interrupted`` (Ray may have replaced this with a plain one)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """What a shell reports for a program the signal ended: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class _StopSignals:
    def __init__(self) -> None:
        self.received: int | None = None
        self.stopping = threading.Event()
        """Set by the first signal: threads waiting on something long check it and give up."""

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:
            name = signal.Signals(signum).name
            sys.stderr.write(f"{name}: already stopping; every step of the stop is bounded\n")
            return
        self.received = signum
        self.stopping.set()
        raise Interrupted(signum)


_SIGNALS = _StopSignals()


def catch_stop_signals() -> None:
    """SIGINT and SIGTERM raise ``Interrupted`` in the main thread from now on (the first of them only).

    Call it again after ``ray.init``, which installs a SIGTERM handler of its own. A no-op off the main
    thread (a signal handler can only be set there).
    """
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, _SIGNALS.handle)


def interrupted(exc: KeyboardInterrupt) -> Interrupted:
    """The stop ``exc`` stands for. Ray re-raises what a signal handler raised during ``ray.get`` as a plain
    ``KeyboardInterrupt``: catch that, and ask this which signal it was."""
    if isinstance(exc, Interrupted):
        return exc
    return Interrupted(_SIGNALS.received or signal.SIGINT)


def stopping() -> threading.Event:
    """Set once a stop signal has arrived."""
    return _SIGNALS.stopping


def become_subreaper() -> bool:
    """Make processes orphaned below this one (Ray's workers and agents, when their raylet exits) children of
    this process instead of init, so that ``stop_descendants`` still finds them. Linux only; ``False``
    elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here, as psutil below: every command imports this module for its signals alone

    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def stop_descendants(*, grace_s: float = 5.0) -> list[str]:
    """SIGTERM every process still descended from this one (but ``KEEP_RUNNING``), SIGKILL those alive after
    ``grace_s``, and reap them. Returns ``"pid name"`` of those that had to be killed."""
    import psutil

    me = psutil.Process()
    processes = []
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.name() not in KEEP_RUNNING:
                processes.append(child)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    killed = []
    for process in alive:
        with contextlib.suppress(psutil.Error):
            killed.append(f"{process.pid} {process.name()}")
            process.kill()
    psutil.wait_procs(alive, timeout=grace_s)  # reaps them: adopted orphans are this process's children
    return killed


class Steps:
    """When each step of a stop ended, counted from the signal: one line that says where a slow stop spent its
    time. Steps marked before ``start`` (a stop that began before anything ran) are not shown."""

    def __init__(self) -> None:
        self._started: float | None = None
        self._marks: list[str] = []

    def start(self) -> None:
        self._started = time.monotonic()

    def mark(self, step: str) -> None:
        if self._started is not None:
            self._marks.append(f"{step} at +{time.monotonic() - self._started:.1f}s")

    def summary(self) -> str:
        return " · ".join(self._marks) or "nothing was running yet"

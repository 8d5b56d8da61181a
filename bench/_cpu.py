"""CPU time of the benchmark's own processes, by role: where a node's cost goes on a 2-core machine.

The machine is shared, so whole-machine CPU would count the neighbours; this sums only the processes of this
benchmark: itself, its descendants (the tool server, Ray's daemons and workers) and the PostgreSQL backends of
its database. Workers Ray reaps during a measurement are still counted, through the raylet's ``children_*``.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psutil

from bench._smoke import SMOKE

ROLES = ("supervisor", "tool calls (Ray)", "Ray daemons", "tool server", "benchmark process", "PostgreSQL")


def _role(process: psutil.Process, title: str, tool_server_pid: int) -> str:
    if process.pid == os.getpid():
        return "benchmark process"
    if process.pid == tool_server_pid:
        return "tool server"
    if title.startswith("postgres"):
        return "PostgreSQL"
    if title.startswith("ray::BenchSupervisor"):
        return "supervisor"
    if title.startswith("ray::") and not title.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
        return "tool calls (Ray)"  # tool tasks, idle workers, the caller actors
    return "Ray daemons"


Classify = Callable[[psutil.Process, str], str]
"""A process and its command line → the role its CPU time is counted under."""


class CpuMeter:
    """``with meter.measure() as used:`` fills ``used`` with CPU seconds by role once the block ends."""

    def __init__(self, database: str, tool_server_pid: int, classify: Classify | None = None) -> None:
        self._database = database
        self._classify: Classify = classify or (lambda process, title: _role(process, title, tool_server_pid))

    def _processes(self) -> list[psutil.Process]:
        me = psutil.Process()
        found = [me, *me.children(recursive=True)]
        for process in psutil.process_iter(["cmdline"]):
            title = " ".join(process.info["cmdline"] or [])
            if title.startswith("postgres") and f" {self._database} " in title:
                found.append(process)
        return found

    def _snapshot(self) -> dict[tuple[str, int], float]:
        seen: dict[tuple[str, int], float] = {}
        for process in self._processes():
            try:
                title = " ".join(process.cmdline())
                times = process.cpu_times()
            except psutil.Error:
                continue
            seen[(self._classify(process, title), process.pid)] = times.user + times.system
            if "/raylet" in title.split(" ", 1)[0]:  # workers it has reaped
                seen[("tool calls (Ray)", -process.pid)] = times.children_user + times.children_system
        return seen

    @contextmanager
    def measure(self) -> Iterator[defaultdict[str, float]]:
        used: defaultdict[str, float] = defaultdict(float)
        before = self._snapshot()
        yield used
        for (role, pid), seconds in self._snapshot().items():
            used[role] += seconds - before.get((role, pid), 0.0)


def machine_busy(window_s: float = 0.5) -> float:
    """The fraction of the machine's CPU time spent busy over ``window_s``, by anyone."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(value) for value in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields), idle

    total_before, idle_before = sample()
    time.sleep(window_s)
    total_after, idle_after = sample()
    total = total_after - total_before
    return 1.0 - (idle_after - idle_before) / total if total else 0.0


def wait_for_quiet(limit: float = 0.5, max_wait_s: float = 1.5) -> bool:
    """Wait (a little) for the neighbours to leave the CPU; ``True`` if the machine was below ``limit`` busy.

    A smoke run does not wait: its numbers mean nothing anyway."""
    if SMOKE:
        return False
    deadline = time.monotonic() + max_wait_s
    while True:
        if machine_busy() < limit:
            return True
        if time.monotonic() >= deadline:
            return False

"""Loopback servers for tests and benchmarks: free ports to start them on, and waiting until one answers."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that nothing listens on now (all held open until all are picked)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now."""
    (port,) = free_ports(1)
    return port


def wait_until_ok(
    url: str,
    *,
    within_s: float,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
    poll_s: float = 0.25,
) -> None:
    """Poll ``url`` until it answers 200. Fails if ``within_s`` passes first, or if ``process`` (the server
    being waited for) exits; ``log`` (its output) then ends the message."""

    def tail() -> str:
        return "\n" + log.read_text(errors="replace")[-3000:] if log is not None else ""

    deadline = time.monotonic() + within_s
    while True:
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the server exited ({process.returncode}) before {url} answered{tail()}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {within_s:g} s{tail()}")
        time.sleep(poll_s)

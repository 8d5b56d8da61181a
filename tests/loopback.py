"""Loopback servers for tests and benchmarks: free ports to start them on, and waiting until one answers."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path

import httpx


def _ephemeral_range() -> range:
    """The ports the kernel hands out as the local end of outgoing connections (Linux's default if unknown)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


LISTENING_PORTS = range(20000, 32768)
"""Where tests' servers listen: above Ray's worker ports (10002-19999) and below the kernel's ephemeral range. A
port from that range (what binding port 0 gives) can be taken, the moment its server stops, as the local end
of any process's outgoing connection, and a server started again on it then finds it in use."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that nothing uses now (all held open until all are picked), outside
    the ephemeral range when that leaves room (``LISTENING_PORTS``)."""
    ephemeral = _ephemeral_range()
    candidates = [port for port in LISTENING_PORTS if port not in ephemeral]
    random.shuffle(candidates)
    probes: list[socket.socket] = []
    try:
        for port in candidates:
            if len(probes) == count:
                break
            probe = socket.socket()
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                probe.close()
                continue
            probes.append(probe)
        while len(probes) < count:  # no room outside the ephemeral range: any port the kernel gives
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            probes.append(probe)
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing uses now (as ``free_ports``)."""
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

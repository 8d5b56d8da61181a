"""The load benchmark's instruments: bounded client loops over HTTP, the supervisor's memory, run phases.

- ``run_clients``: N closed-loop clients, each posting ``POST /runs?wait=60`` for C-102 and posting again when
  the answer comes; every attempt is kept with its times and, when it did not complete, why.
- ``SupervisorSampler``: while loaded, the supervisor's resident memory (``/proc/<pid>/status``) and the number
  of runs it drives (its ``ping()``), four times a second.
- ``phases`` and ``failed_nodes``: where a run's time went and why a run failed, from the run's own records
  (summary row, events, tool ledger).
- ``profile``: py-spy on chosen processes for the measured window (a diagnostic: it adds load).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

CASE = {"case_id": "C-102"}
HEADERS = {"Authorization": "Bearer dev-key-tenant-demo"}
WAIT_S = 60
"""The API's longest ``?wait``: a run still going after it comes back unfinished and counts as an error."""


@dataclass(frozen=True)
class Attempt:
    """One ``POST /runs?wait`` by one client: wall-clock times (``time.time``), so they compare with the run's
    own timestamps, and why it did not count when it did not."""

    sent: float
    answered: float
    error: str | None
    run_id: str | None

    @property
    def latency_ms(self) -> float:
        return (self.answered - self.sent) * 1000


async def one_run(
    http: httpx.AsyncClient, body: Mapping[str, Any] = CASE, headers: Mapping[str, str] = HEADERS
) -> Attempt:
    """A run through the API (C-102 unless ``body`` says otherwise); only a run that came back ``completed``
    is a success."""
    sent = time.time()
    try:
        response = await http.post("/runs", params={"wait": WAIT_S}, json=dict(body), headers=dict(headers))
    except httpx.HTTPError as exc:
        return Attempt(sent, time.time(), f"client: {type(exc).__name__}", None)
    answered = time.time()
    try:
        answer: Any = response.json()
    except ValueError:
        answer = {}
    if response.status_code != 201:
        slug = str(answer.get("type", "")).rsplit("/", 1)[-1] if isinstance(answer, dict) else ""
        return Attempt(sent, answered, f"HTTP {response.status_code} {slug}".strip(), None)
    run_id = answer.get("run_id")
    if answer.get("status") != "completed":
        reason = answer.get("stop_reason") or "still running after the wait"
        return Attempt(sent, answered, f"run {answer.get('status')}: {reason}", run_id)
    return Attempt(sent, answered, None, run_id)


async def run_clients(
    base_url: str,
    clients: int,
    seconds: float,
    body: Mapping[str, Any] = CASE,
    headers: Mapping[str, str] = HEADERS,
) -> tuple[list[Attempt], float, float]:
    """``clients`` loops, each posting a run (``one_run``) after the previous one answered, for ``seconds``.

    Returns every attempt started in the window (those still going at its end are awaited) and the window's
    start and end (``time.time``).
    """
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    timeout = httpx.Timeout(WAIT_S + 30.0)
    attempts: list[Attempt] = []
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as http:
        started = time.time()
        until = started + seconds

        async def loop() -> None:
            while time.time() < until:
                attempts.append(await one_run(http, body, headers))

        await asyncio.gather(*(loop() for _ in range(clients)))
    return attempts, started, started + seconds


def rss_kb(pid: int) -> int:
    """Resident set size of process ``pid``, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise KeyError("VmRSS")


@dataclass
class SupervisorSampler:
    """Samples the supervisor's RSS and its active runs until stopped."""

    supervisor: Any
    pid: int
    interval_s: float = 0.25
    rss_kb: list[int] = field(default_factory=list)
    active: list[int] = field(default_factory=list)

    async def sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            ping = await self.supervisor.ping.remote()
            self.active.append(int(ping["active_runs"]))
            self.rss_kb.append(rss_kb(self.pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval_s)

    def mean_rss_mb(self) -> float:
        return statistics.fmean(self.rss_kb) / 1024 if self.rss_kb else 0.0

    def peak_rss_mb(self) -> float:
        return max(self.rss_kb, default=0) / 1024

    def mean_active(self) -> float:
        return statistics.fmean(self.active) if self.active else 0.0


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` in 0..1) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))]


def error_reasons(attempts: list[Attempt]) -> Counter[str]:
    return Counter(attempt.error for attempt in attempts if attempt.error is not None)


PHASES = (
    "request → run created",
    "created → first dispatch",
    "dispatch → call starts",
    "the call",
    "call ends → success recorded",
    "last success → run finished",
    "run finished → response",
)


async def phases(dsn: str, attempts: list[Attempt]) -> dict[str, list[float]]:
    """Per run (and per node for the node phases), milliseconds in each of ``PHASES``, from the run's records."""
    by_id = {attempt.run_id: attempt for attempt in attempts if attempt.run_id and attempt.error is None}
    out: dict[str, list[float]] = {phase: [] for phase in PHASES}
    if not by_id:
        return out
    keys = [uuid.UUID(run_id) for run_id in by_id]
    connection = await asyncpg.connect(dsn)
    try:
        runs = await connection.fetch(
            "SELECT run_id, created_at, finished_at FROM runs WHERE run_id = ANY($1)", keys
        )
        ledger = await connection.fetch(
            "SELECT run_id, node_id, dispatched_at, started_at, finished_at FROM tool_ledger "
            "WHERE run_id = ANY($1)",
            keys,
        )
        succeeded = await connection.fetch(
            "SELECT run_id, node_id, data->>'at' AS at FROM run_events "
            "WHERE run_id = ANY($1) AND kind = 'node_succeeded'",
            keys,
        )
    finally:
        await connection.close()
    recorded = {(row["run_id"], row["node_id"]): datetime.fromisoformat(row["at"]) for row in succeeded}
    nodes: dict[uuid.UUID, list[asyncpg.Record]] = {}
    for row in ledger:
        nodes.setdefault(row["run_id"], []).append(row)
    for run in runs:
        attempt = by_id[str(run["run_id"])]
        rows = nodes.get(run["run_id"], [])
        if not rows or run["finished_at"] is None:
            continue
        created, finished = run["created_at"].timestamp(), run["finished_at"].timestamp()
        first_dispatch = min(row["dispatched_at"] for row in rows).timestamp()
        last_success = max(recorded[(run["run_id"], row["node_id"])] for row in rows).timestamp()
        out["request → run created"].append((created - attempt.sent) * 1000)
        out["created → first dispatch"].append((first_dispatch - created) * 1000)
        out["last success → run finished"].append((finished - last_success) * 1000)
        out["run finished → response"].append((attempt.answered - finished) * 1000)
        for row in rows:
            done = recorded[(run["run_id"], row["node_id"])]
            out["dispatch → call starts"].append(
                (row["started_at"] - row["dispatched_at"]).total_seconds() * 1000
            )
            out["the call"].append((row["finished_at"] - row["started_at"]).total_seconds() * 1000)
            out["call ends → success recorded"].append((done - row["finished_at"]).total_seconds() * 1000)
    return out


async def failed_nodes(dsn: str, attempts: list[Attempt]) -> Counter[str]:
    """Why runs that came back but did not complete got there: their failed calls, by node and error code."""
    keys = [uuid.UUID(attempt.run_id) for attempt in attempts if attempt.error and attempt.run_id]
    if not keys:
        return Counter()
    connection = await asyncpg.connect(dsn)
    try:
        rows = await connection.fetch(
            "SELECT node_id, error->>'code' AS code FROM tool_ledger WHERE run_id = ANY($1) AND status <> 'succeeded'",
            keys,
        )
    finally:
        await connection.close()
    return Counter(f"{row['node_id']} {row['code']}" for row in rows)


async def drained(supervisor: Any, timeout_s: float) -> float:
    """Wait until the supervisor drives no run (runs whose clients gave up go on); seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if not (await supervisor.ping.remote())["active_runs"]:
            break
        await asyncio.sleep(0.25)
    return time.monotonic() - started


def profile(targets: dict[str, int], seconds: float, directory: Path) -> list[subprocess.Popen[bytes]]:
    """Start py-spy (50 Hz, raw collapsed stacks, without pausing the process) on each named pid."""
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = str(Path(sys.executable).parent / "py-spy")
    options = ["record", "--duration", str(int(seconds)), "--rate", "50", "--format", "raw", "--nonblocking"]
    return [
        subprocess.Popen(
            [py_spy, *options, "--pid", str(pid), "--output", str(directory / f"{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, pid in targets.items()
    ]

"""MCP tool-call latency through raydag's client in both protocol eras, and the server's throughput, in one run.

The tool server runs in a process of its own (uvicorn, as in production it runs beside the runtime, not in
it), against the same PostgreSQL; every call carries a freshly minted task token, which the server verifies
and records in its replay cache. Latency arms, interleaved sample by sample:

- ``2026-07-28 one POST per call``: one ``McpConnections`` for the whole run, as a caller actor keeps it:
  keep-alive connection, no handshake; each call is one hand-built HTTP request (``actors.calls.mcp.stateless_post``,
  as shipped since 2026-12-01).
- ``2026-07-28 SDK client``: the same connections, each call through the SDK's ``Client`` (the tools listed
  once): what raydag shipped until 2026-12-01 (``McpConnections(sdk_calls=True)``).
- ``2026-07-28 fresh``: a new HTTP client and SDK client per call (what raydag did before: discover-free, but
  a new connection and a ``tools/list`` before the output can be checked).
- ``2025-11-25 session per call, kept-alive``: initialize + initialized + call + list per call, over the
  shared connections (what raydag does in ``legacy`` mode).
- ``2025-11-25 session per call, fresh``: the same with a new connection per call: the reference design.

Throughput: ``CONCURRENCY`` callers for ``THROUGHPUT_S`` seconds each, per era, sharing one ``McpConnections``;
and, for the server's own capacity without the SDK client's cost, hand-built 2026-07-28 requests over httpx.

Server CPU per call: the same one-POST calls to two tool-server processes side by side, one answering plain
2026-07-28 calls directly (``mcp_server.stateless_call``, as shipped) and one sending every request through
the SDK (``ToolServerConfig(direct_calls=False)``), in alternating rounds of ``SERVER_CPU_CALLS`` calls, 1 and
16 at a time; the CPU of each server process and of the database's PostgreSQL backends in its rounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack

import httpx

from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections, call_tool
from actors.launch.settings import Settings
from actors.store.database import drop_database, embedded_postgres, ensure_database, with_database
from bench._smoke import sized
from bench._stats import summary
from dag.tokens import TaskTokens
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.server import MCP_PATH
from tests.caseops import prepare_caseops_database
from tests.loopback import free_port

SAMPLES = sized(int(os.environ.get("BENCH_SAMPLES", "200")), 2)
WARMUP = sized(10, 1)
CONCURRENCY = sized(tuple(int(n) for n in os.environ.get("BENCH_MCP_CONCURRENCY", "1,8,32").split(",")), (2,))
THROUGHPUT_S = sized(float(os.environ.get("BENCH_MCP_THROUGHPUT_S", "5")), 0.3)
SERVER_CPU_CALLS = sized(int(os.environ.get("BENCH_MCP_SERVER_CALLS", "1000")), 20)
SERVER_CPU_ROUNDS = sized(3, 1)
TOOL = "caseops_get_case_snapshot"
MODERN, LEGACY = "2026-07-28", "legacy"
SHIPPED = "2026-07-28, one POST per call, kept-alive connection (as shipped)"


def serve(port: int) -> None:
    """The tool server, in this process: ``python -m bench.mcp_latency serve PORT`` (DSN and key from env)."""
    import uvicorn

    from mcp_server.config import ToolServerConfig
    from mcp_server.limits import TenantLimits
    from mcp_server.server import ToolServer

    tokens = TaskTokens(
        key=bytes.fromhex(os.environ["BENCH_TOKEN_KEY"]), audience=os.environ["BENCH_MCP_URL"]
    )
    # Limits far above the load: the benchmark measures the server, not the 429s.
    limits = TenantLimits(max_in_flight=10_000, rate_per_s=1e6, burst=1_000_000)
    config = ToolServerConfig(
        dsn=os.environ["BENCH_DSN"],
        tokens=tokens,
        pool_size=8,
        tenant_limits=limits,
        direct_calls=os.environ.get("BENCH_DIRECT_CALLS", "1") == "1",
    )
    uvicorn.run(ToolServer(config).asgi_app(), host="127.0.0.1", port=port, log_level="warning")


class _Caller:
    def __init__(self, url: str, tokens: TaskTokens) -> None:
        self.url = url
        self.tokens = tokens

    def call(self, protocol: str) -> ToolCall:
        token = self.tokens.mint(
            subject="bench",
            tenant_id="tenant-demo",
            task_id="bench/node/1",
            resource={"case_id": "C-102"},
            tool=TOOL,
            scopes={CASEOPS_TOOLS[TOOL].scope},
        )
        return ToolCall(
            "bench", "node", 1, TOOL, {"case_id": "C-102"}, self.url, token, 10.0, protocol=protocol
        )


async def _timed(action: Callable[[], Awaitable[bool]]) -> float:
    started = time.perf_counter()
    ok = await action()
    elapsed = (time.perf_counter() - started) * 1000
    if not ok:
        raise RuntimeError("a benchmark call failed")
    return elapsed


async def _latency(caller: _Caller) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Milliseconds per call by arm, and the client's CPU ms per call (this process's CPU time)."""
    async with McpConnections() as shared, McpConnections(sdk_calls=True) as sdk:

        async def reused(protocol: str) -> bool:
            return (await shared.call(caller.call(protocol), CASEOPS_TOOLS)).ok

        async def through_sdk() -> bool:
            return (await sdk.call(caller.call(MODERN), CASEOPS_TOOLS)).ok

        async def fresh(protocol: str) -> bool:
            return (await call_tool(caller.call(protocol), CASEOPS_TOOLS)).ok

        arms: dict[str, Callable[[], Awaitable[bool]]] = {
            SHIPPED: lambda: reused(MODERN),
            "2026-07-28, SDK client, reused connections": through_sdk,
            "2026-07-28, fresh client per call": lambda: fresh(MODERN),
            "2025-11-25, session per call, kept-alive connections": lambda: reused(LEGACY),
            "2025-11-25, session per call, fresh connection": lambda: fresh(LEGACY),
        }
        for action in arms.values():
            for _ in range(WARMUP):
                await _timed(action)
        samples: dict[str, list[float]] = {label: [] for label in arms}
        cpu: dict[str, float] = dict.fromkeys(arms, 0.0)
        for _ in range(SAMPLES):
            for label, action in arms.items():
                before = time.process_time()
                samples[label].append(await _timed(action))
                cpu[label] += time.process_time() - before
        return samples, {label: used * 1000 / SAMPLES for label, used in cpu.items()}


async def _throughput(
    caller: _Caller, protocol: str, concurrency: int, *, sdk: bool = False
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    async with McpConnections(sdk_calls=sdk) as shared:
        await shared.call(caller.call(protocol), CASEOPS_TOOLS)  # the 2026 client and its tools/list
        deadline = time.perf_counter() + THROUGHPUT_S

        async def worker() -> None:
            while time.perf_counter() < deadline:
                latencies.append(await _timed(lambda: _ok(shared, caller.call(protocol))))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def _raw_throughput(caller: _Caller, concurrency: int) -> tuple[float, list[float]]:
    """The same call as hand-built HTTP requests: what the server sustains when the client costs little."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": TOOL, "arguments": {"case_id": "C-102"}, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    routing = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": TOOL}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as http:

        async def one() -> bool:
            headers = {**accept, **routing, "Authorization": f"Bearer {caller.call(MODERN).token}"}
            response = await http.post(caller.url, headers=headers, content=body)
            return response.status_code == 200 and not response.json()["result"].get("isError")

        deadline = time.perf_counter() + THROUGHPUT_S

        async def worker() -> None:
            while time.perf_counter() < deadline:
                latencies.append(await _timed(one))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def _server_cpu(
    callers: dict[str, tuple[_Caller, int]], database: str
) -> dict[tuple[str, int], tuple[float, float, float]]:
    """Per (server, calls at once): CPU ms per call of the server process, its PostgreSQL backends and this
    client, summed over alternating rounds."""
    import psutil

    def backends() -> float:
        total = 0.0
        for process in psutil.process_iter(["cmdline", "cpu_times"]):
            title = " ".join(process.info["cmdline"] or [])
            if title.startswith("postgres") and f" {database} " in title and process.info["cpu_times"]:
                total += process.info["cpu_times"].user + process.info["cpu_times"].system
        return total

    used: dict[tuple[str, int], list[float]] = {}
    async with McpConnections() as shared:
        for caller, _ in callers.values():
            for _ in range(WARMUP):
                await _ok(shared, caller.call(MODERN))
        for _ in range(SERVER_CPU_ROUNDS):
            for concurrency in (1, 16):
                for label, (caller, pid) in callers.items():
                    server = psutil.Process(pid)
                    gate = asyncio.Semaphore(concurrency)

                    async def one(caller: _Caller = caller, gate: asyncio.Semaphore = gate) -> bool:
                        async with gate:
                            return await _ok(shared, caller.call(MODERN))

                    before = (sum(server.cpu_times()[:2]), backends(), time.process_time())
                    if not all(await asyncio.gather(*(one() for _ in range(SERVER_CPU_CALLS)))):
                        raise RuntimeError("a benchmark call failed")
                    after = (sum(server.cpu_times()[:2]), backends(), time.process_time())
                    sums = used.setdefault((label, concurrency), [0.0, 0.0, 0.0])
                    for index in range(3):
                        sums[index] += after[index] - before[index]
    calls = SERVER_CPU_CALLS * SERVER_CPU_ROUNDS
    return {key: (s[0] * 1000 / calls, s[1] * 1000 / calls, s[2] * 1000 / calls) for key, s in used.items()}


async def _ok(connections: McpConnections, call: ToolCall) -> bool:
    return (await connections.call(call, CASEOPS_TOOLS)).ok


def _line(label: str, samples: list[float], cpu_ms: float) -> str:
    s = summary(samples)
    return (
        f"| {label} | {s['n']:.0f} | {s['median']:.1f} | {s['p90']:.1f} | {s['min']:.1f} | {s['max']:.1f} "
        f"| {cpu_ms:.2f} |"
    )


def main() -> None:
    settings = Settings()
    with ExitStack() as stack:
        if settings.database_url is not None:
            admin = settings.database_url.get_secret_value()
        else:
            admin = with_database(
                stack.enter_context(embedded_postgres(settings.home_dir / "bench")), "postgres"
            )
        name = f"raydag_bench_{secrets.token_hex(3)}"
        asyncio.run(ensure_database(admin, name))
        stack.callback(lambda: asyncio.run(drop_database(admin, name)))
        dsn = with_database(admin, name)
        asyncio.run(prepare_caseops_database(dsn))

        key = secrets.token_bytes(32)
        url, pid = _start_server(stack, dsn, key, direct=True)
        caller = _Caller(url, TaskTokens(key=key, audience=url))
        sdk_url, sdk_pid = _start_server(stack, dsn, key, direct=False)
        sdk_caller = _Caller(sdk_url, TaskTokens(key=key, audience=sdk_url))

        samples, cpu = asyncio.run(_latency(caller))
        print("\n### MCP tool-call latency through raydag's client (one call, C-102 case snapshot)\n")
        print("| arm | n | median ms | p90 ms | min ms | max ms | client CPU ms per call |")
        print("|---|---|---|---|---|---|---|")
        for label, values in samples.items():
            print(_line(label, values, cpu[label]))
        modern = summary(samples[SHIPPED])["median"]
        for label in (
            "2026-07-28, SDK client, reused connections",
            "2025-11-25, session per call, fresh connection",
            "2025-11-25, session per call, kept-alive connections",
        ):
            print(
                f"\n{label} / 2026-07-28 one POST per call (medians): {summary(samples[label])['median'] / modern:.2f}x"
            )

        print("\n### Server throughput (one tool-server process, calls through raydag's client)\n")
        print("| client, era | callers | calls/s | median ms | p90 ms |\n|---|---|---|---|---|")
        arms: tuple[tuple[str, Callable[[int], Awaitable[tuple[float, list[float]]]]], ...] = (
            ("raydag, 2026-07-28, one POST per call (as shipped)", lambda n: _throughput(caller, MODERN, n)),
            ("raydag, 2026-07-28, SDK client", lambda n: _throughput(caller, MODERN, n, sdk=True)),
            ("raydag, 2025-11-25 session per call", lambda n: _throughput(caller, LEGACY, n)),
            ("raw HTTP, 2026-07-28", lambda n: _raw_throughput(caller, n)),
        )
        for label, measure in arms:
            for concurrency in CONCURRENCY:
                rate, latencies = asyncio.run(_run(measure(concurrency)))
                s = summary(latencies)
                print(f"| {label} | {concurrency} | {rate:.0f} | {s['median']:.1f} | {s['p90']:.1f} |")

        direct, through_sdk = "plain calls answered directly (as shipped)", "every request through the SDK"
        cpu_by = asyncio.run(_server_cpu({direct: (caller, pid), through_sdk: (sdk_caller, sdk_pid)}, name))
        print("\n### Tool server CPU per call: direct answers against the SDK path (one-POST client)\n")
        print(
            "| server | calls at once | server CPU ms per call | PostgreSQL CPU ms per call | client CPU ms per call |"
        )
        print("|---|---|---|---|---|")
        for (label, concurrency), (server_ms, database_ms, client_ms) in sorted(cpu_by.items()):
            print(f"| {label} | {concurrency} | {server_ms:.3f} | {database_ms:.3f} | {client_ms:.3f} |")
        for concurrency in (1, 16):
            ratio = cpu_by[(direct, concurrency)][0] / cpu_by[(through_sdk, concurrency)][0]
            print(f"\nServer CPU per call, direct ÷ SDK, {concurrency} at once: {ratio:.2f}")


def _start_server(stack: ExitStack, dsn: str, key: bytes, *, direct: bool) -> tuple[str, int]:
    """A tool server process of its own on a free loopback port: its URL and pid."""
    port = free_port()
    url = f"http://127.0.0.1:{port}{MCP_PATH}"
    env = {
        **os.environ,
        "BENCH_DSN": dsn,
        "BENCH_TOKEN_KEY": key.hex(),
        "BENCH_MCP_URL": url,
        "BENCH_DIRECT_CALLS": "1" if direct else "0",
    }
    server = subprocess.Popen([sys.executable, "-m", "bench.mcp_latency", "serve", str(port)], env=env)
    stack.callback(server.wait, 10)
    stack.callback(server.terminate)
    _wait_until_up(url)
    return url, server.pid


async def _run(measurement: Awaitable[tuple[float, list[float]]]) -> tuple[float, list[float]]:
    return await measurement


def _wait_until_up(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)  # any answer (401) means it is up
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"the tool server at {url} did not start")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    else:
        main()

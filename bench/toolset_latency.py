"""Per-call cost of a stdio toolset server against a Streamable HTTP one, side by side in one run.

``python -m bench.toolset_latency`` (not in ``python -m bench``'s list: ``bench/__main__.py`` is shared).

Both transports serve the same program: ``@modelcontextprotocol/server-everything`` 2026.8.31 (pinned in
tests/node), started once as ``stdio`` (a child of the caller, under raydag's guardian) and once as
``streamableHttp`` (its own process on a loopback port), both answering in the 2025-11-25 era it speaks,
without credentials, so each keeps one session for every call. The tool is ``echo``. Arms, interleaved
sample by sample so drift hits them alike:

- ``client``: ``McpConnections.call`` in this process, the call path a ``ToolCaller`` runs, without Ray;
- ``ToolCaller``: the same call as an actor task of a ``ToolCaller`` on a local Ray (what a node costs to
  dispatch, call and return, less the supervisor's bookkeeping).

Then ``CONCURRENCY`` concurrent callers per transport through the client for ``THROUGHPUT_S`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections
from actors.toolsets.catalogue import build_catalogue
from actors.toolsets.config import HttpServer, StdioServer, Toolsets, parse_toolsets
from bench._stats import summary
from dag.contracts import ToolContract
from tests.integration.toolset_servers import EVERYTHING, NODE, everything_server

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "300"))
WARMUP = 20
CONCURRENCY = tuple(int(n) for n in os.environ.get("BENCH_TOOLSET_CONCURRENCY", "1,8,32").split(","))
THROUGHPUT_S = float(os.environ.get("BENCH_TOOLSET_THROUGHPUT_S", "5"))
TOOLS = "    tools:\n      echo: {scope: demo:read, risk: read_only}\n"


def stdio_toolsets() -> Toolsets:
    text = f"servers:\n  - name: stdio\n    transport: stdio\n    command: {NODE}\n"
    text += f'    args: ["{EVERYTHING}", "stdio"]\n    timeouts: {{connect_s: 30}}\n' + TOOLS
    return parse_toolsets(text, "bench.yaml", {})


def http_toolsets(url: str) -> Toolsets:
    text = f"servers:\n  - name: http\n    transport: streamable-http\n    url: {url}\n" + TOOLS
    return parse_toolsets(text, "bench.yaml", {})


def call_of(server: str, index: int) -> ToolCall:
    return ToolCall("bench", f"n{index}", 1, "echo", {"message": f"m{index}"}, "", "", 10.0, server=server)


async def _timed(action: Callable[[], Awaitable[bool]]) -> float:
    started = time.perf_counter()
    if not await action():
        raise RuntimeError("a benchmark call failed")
    return (time.perf_counter() - started) * 1000


async def _contracts(connections: McpConnections, toolsets: Toolsets) -> dict[str, ToolContract]:
    server = toolsets.servers[0]
    listing = await connections.list_tools(server.name)
    return dict(build_catalogue(toolsets, {server.name: listing}).contracts)


async def _latency(
    servers: list[HttpServer | StdioServer], toolsets: dict[str, Toolsets]
) -> dict[str, list[float]]:
    import ray

    from actors.calls.caller import ToolCaller

    caller: Any = ray.remote(ToolCaller).options(max_concurrency=32, num_cpus=0).remote(servers)
    await caller.start.remote()
    async with McpConnections(servers) as connections:
        contracts = {name: await _contracts(connections, sets) for name, sets in toolsets.items()}
        for name in toolsets:
            await caller.list_tools.remote(name)  # its own sessions, stdio server started
        counter = iter(range(10**9))

        def client(name: str) -> Callable[[], Awaitable[bool]]:
            async def act() -> bool:
                return (await connections.call(call_of(name, next(counter)), contracts[name])).ok

            return act

        def actor(name: str) -> Callable[[], Awaitable[bool]]:
            async def act() -> bool:
                outcome = await caller.call.remote(call_of(name, next(counter)), contracts[name]["echo"])
                return bool(outcome.ok)

            return act

        arms = {
            "stdio, client": client("stdio"),
            "Streamable HTTP, client": client("http"),
            "stdio, ToolCaller on Ray": actor("stdio"),
            "Streamable HTTP, ToolCaller on Ray": actor("http"),
        }
        for action in arms.values():
            for _ in range(WARMUP):
                await _timed(action)
        samples: dict[str, list[float]] = {label: [] for label in arms}
        for _ in range(SAMPLES):
            for label, action in arms.items():
                samples[label].append(await _timed(action))
    await caller.stop.remote()
    ray.kill(caller)
    return samples


async def _throughput(
    servers: list[HttpServer | StdioServer], toolsets: Toolsets, concurrency: int
) -> tuple[float, list[float]]:
    name = toolsets.servers[0].name
    latencies: list[float] = []
    async with McpConnections(servers) as connections:
        contracts = await _contracts(connections, toolsets)
        deadline = time.perf_counter() + THROUGHPUT_S
        counter = iter(range(10**9))

        async def worker() -> None:
            while time.perf_counter() < deadline:
                latencies.append(
                    await _timed(lambda: _ok(connections.call(call_of(name, next(counter)), contracts)))
                )

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def _ok(outcome: Awaitable[Any]) -> bool:
    return bool((await outcome).ok)


def _line(label: str, samples: list[float]) -> str:
    s = summary(samples)
    return (
        f"| {label} | {s['n']:.0f} | {s['median']:.2f} | {s['p90']:.2f} | {s['min']:.2f} | {s['max']:.2f} |"
    )


def main() -> None:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level=logging.WARNING)
    try:
        with (
            tempfile.TemporaryDirectory() as scratch,
            everything_server(Path(scratch) / "everything.log") as http,
        ):
            toolsets = {"stdio": stdio_toolsets(), "http": http_toolsets(http.url)}
            servers = [toolsets["stdio"].servers[0], toolsets["http"].servers[0]]
            samples = asyncio.run(_latency(servers, toolsets))
            print("\n### stdio against Streamable HTTP: one `echo` call of server-everything, same program\n")
            print("| arm | n | median ms | p90 ms | min ms | max ms |\n|---|---|---|---|---|---|")
            for label, values in samples.items():
                print(_line(label, values))
            for where in ("client", "ToolCaller on Ray"):
                stdio = summary(samples[f"stdio, {where}"])["median"]
                over_http = summary(samples[f"Streamable HTTP, {where}"])["median"]
                print(
                    f"\n{where}: stdio − HTTP (medians) = {stdio - over_http:+.2f} ms ({stdio / over_http:.2f}x)"
                )
            print("\n| transport | callers | calls/s | median ms | p90 ms |\n|---|---|---|---|---|")
            for name, label in (("stdio", "stdio"), ("http", "Streamable HTTP")):
                for concurrency in CONCURRENCY:
                    rate, latencies = asyncio.run(
                        _throughput([toolsets[name].servers[0]], toolsets[name], concurrency)
                    )
                    s = summary(latencies)
                    print(f"| {label} | {concurrency} | {rate:.0f} | {s['median']:.2f} | {s['p90']:.2f} |")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()

"""Toolset declarations for the servers the toolset tests run: other people's (npm, pinned in tests/node)
and the tests' own toy server."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.toolsets.config import HttpServer, StdioServer, Toolsets, parse_toolsets
from tests.conftest import REPO
from tests.loopback import free_port

NODE_MODULES = REPO / "tests" / "node" / "node_modules"
NODE = NODE_MODULES / ".bin" / "node"
FILESYSTEM = NODE_MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
EVERYTHING = NODE_MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TOY = Path(__file__).with_name("toy_mcp_server.py")

READ_ONLY_FILE_TOOLS = """\
      list_directory: {scope: files:read, risk: read_only, run_bound: {path: {resource: root, match: path_within}}}
      read_text_file: {scope: files:read, risk: read_only, run_bound: {path: {resource: root, match: path_within}}}
"""


def filesystem_toolsets(root: Path, tools: str = READ_ONLY_FILE_TOOLS) -> Toolsets:
    text = f"""\
servers:
  - name: files
    transport: stdio
    command: {NODE}
    args: ["{FILESYSTEM}", "{root}"]
    timeouts: {{connect_s: 30, call_s: 10}}
    tools:
{tools}"""
    return parse_toolsets(text, "filesystem.yaml", {})


def filesystem(root: Path) -> StdioServer:
    server = filesystem_toolsets(root).servers[0]
    assert isinstance(server, StdioServer)
    return server


def toy_toolsets(
    protocol: str = "auto",
    echo_description: str | None = None,
    extra_tools: str = "",
    env: str = "",
    call_s: float = 10,
) -> Toolsets:
    """The toy stdio server; ``env`` adds ``NAME: value`` pairs to its environment, ``extra_tools`` overlay
    lines."""
    variables = [f"TOY_ECHO_DESCRIPTION: {json.dumps(echo_description)}"] if echo_description else []
    variables += [env] if env else []
    environment = f"    env: {{{', '.join(variables)}}}" + chr(10) if variables else ""
    text = f"""\
servers:
  - name: toy
    transport: stdio
    command: {sys.executable}
    args: ["{TOY}"]
{environment}    protocol: {protocol}
    timeouts: {{connect_s: 30, call_s: {call_s:g}}}
    tools:
      echo: {{scope: toy:read, risk: read_only}}
      sleep: {{scope: toy:read, risk: read_only}}
{extra_tools}"""
    return parse_toolsets(text, "toy.yaml", {})


def toy_stdio(protocol: str = "auto", echo_description: str | None = None) -> StdioServer:
    server = toy_toolsets(protocol, echo_description).servers[0]
    assert isinstance(server, StdioServer)
    return server


EVERYTHING_TOOLS = """\
      echo: {scope: demo:read, risk: read_only}
      get-sum: {scope: demo:read, risk: read_only}
      get-structured-content: {scope: demo:read, risk: read_only}
"""


def everything_toolsets(url: str, tools: str = EVERYTHING_TOOLS) -> Toolsets:
    text = f"""\
servers:
  - name: everything
    transport: streamable-http
    url: {url}
    tools:
{tools}"""
    return parse_toolsets(text, "everything.yaml", {})


@contextmanager
def everything_server(log: Path) -> Iterator[HttpServer]:
    """``mcp-server-everything streamableHttp`` on a free port, stopped at the end."""
    with everything_process(log) as (server, _):
        yield server


@contextmanager
def everything_process(log: Path) -> Iterator[tuple[HttpServer, subprocess.Popen[bytes]]]:
    """``everything_server`` with its process, for a test that holds the server still (SIGSTOP)."""
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [str(NODE), str(EVERYTHING), "streamableHttp"],
            env={"PATH": str(NODE.parent), "PORT": str(port), "HOME": str(log.parent)},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        _wait_until_listening(port, process, log)
        server = everything_toolsets(url).servers[0]
        assert isinstance(server, HttpServer)
        yield server, process
    finally:
        process.terminate()
        process.wait(10)


def _wait_until_listening(
    port: int, process: subprocess.Popen[bytes], log: Path, within_s: float = 60
) -> None:
    deadline = time.monotonic() + within_s
    while True:
        if process.poll() is not None:
            raise AssertionError(
                f"server-everything exited ({process.returncode}): {log.read_text()[-2000:]}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise AssertionError(f"server-everything did not listen within {within_s:g}s") from None
            time.sleep(0.1)

"""A tap on a stdio MCP server's wire, for the tests: ``python stdio_tap.py LOG COMMAND [ARGS...]`` runs
COMMAND with its stdin and stdout relayed line by line, and appends to LOG (JSON lines) the server's pid as it
starts and each request the client sent (its method, the tool of a ``tools/call``, the server's pid), and
each answer it gave a request of the server's (an elicitation's result). The
tests count what reached the server there, never in raydag's records. ``STDIO_TAP_READ_ONLY`` names a tool
the server's listing is made to call read-only (server-everything says its research task writes: see
``test_mcp_tasks._read_only``). Standard library only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import IO


def note(log: IO[str], entry: dict[str, object]) -> None:
    log.write(json.dumps(entry) + "\n")
    log.flush()


def relay_requests(server: subprocess.Popen[bytes], log: IO[str]) -> None:
    assert server.stdin is not None
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict) and "method" in message:
            params = message.get("params") or {}
            entry = {"method": message["method"], "tool": params.get("name"), "task": "task" in params}
            note(log, {**entry, "server": server.pid})
        elif isinstance(message, dict) and isinstance(message.get("result"), dict):
            note(log, {"answer": message["result"], "server": server.pid})  # to a request of the server's
        try:
            server.stdin.write(line)
            server.stdin.flush()
        except OSError:
            return
    server.stdin.close()


def listed_read_only(line: bytes, tool: str) -> bytes:
    message = json.loads(line)
    tools = (message.get("result") or {}).get("tools") if isinstance(message, dict) else None
    if not isinstance(tools, list):
        return line
    for each in tools:
        if each.get("name") == tool:
            each.setdefault("annotations", {})["readOnlyHint"] = True
    return (json.dumps(message) + "\n").encode()


def main() -> int:
    log = open(sys.argv[1], "a", encoding="utf-8")  # noqa: SIM115 - open for the tap's whole life
    server = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    note(log, {"pid": server.pid})
    threading.Thread(target=relay_requests, args=(server, log), daemon=True).start()
    assert server.stdout is not None
    read_only = os.environ.get("STDIO_TAP_READ_ONLY")
    for line in server.stdout:
        if read_only and b'"tools"' in line:
            line = listed_read_only(line, read_only)
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    return server.wait()


if __name__ == "__main__":
    os._exit(main())  # at once: the relaying thread may still be reading stdin

"""An MCP server written to attack raydag's client: it speaks the 2025-11-25 handshake correctly, then answers
each tool with what a broken or malicious server sends. Raw JSON-RPC, no SDK, so that it can send anything.

Over stdio (``python tests/integration/hostile_mcp_server.py``) the secret it echoes is the variable
``HOSTILE_SECRET`` raydag gave it; over Streamable HTTP (``http_app()``) it is the ``Authorization`` header of
the request. ``HOSTILE_STATE`` names a file that stdio calls append ``<pid> <tool> <key>`` lines to (the test
reads which process answered, and how often each key was asked); the HTTP app keeps the same in ``app.calls``.

Over stdio only, a few tools attack the process rather than the answer: ``exit_mid_call`` exits (``os._exit``)
during the first call of each ``key`` and answers the next; ``close_stdout`` closes its stdout and sleeps;
``busy`` starts a child of its own and sleeps, both in the call (their pids on its line of ``HOSTILE_STATE``);
``stderr_secret_at_cut`` writes its secret on stderr where a line of 2,000 characters is cut.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

PROTOCOL = "2025-11-25"
Answer = bytes | tuple[int, bytes]
"""A line (stdio) or body (HTTP) to send back; over HTTP, a status with it."""


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _envelope(request_id: Any, **member: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, **member}).encode()


def _result(request_id: Any, result: Any) -> bytes:
    return _envelope(request_id, result=result)


def _nested(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def _raw(request_id: Any, result_text: str) -> bytes:
    """A response whose result is ``result_text`` as written (which ``json.dumps`` could not produce)."""
    return f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{result_text}}}'.encode()


def answer(request_id: Any, tool: str, args: dict[str, Any], secret: str) -> Answer:
    """What the server answers a ``tools/call`` of ``tool``."""
    denied = f"denied: you sent Authorization: Bearer {secret}"
    match tool:
        case "ok":
            return _result(request_id, _text(str(args.get("text", "ok"))))
        case "secret_uncoded":
            return _result(request_id, {**_text(denied), "isError": True})
        case "secret_coded":
            error = {"error": {"code": "DENIED", "message": denied}}
            return _result(
                request_id, {**_text(json.dumps(error)), "structuredContent": error, "isError": True}
            )
        case "secret_in_code":
            error = {"error": {"code": secret, "message": "see the code"}}
            return _result(
                request_id, {**_text(json.dumps(error)), "structuredContent": error, "isError": True}
            )
        case "secret_rpc":
            return _envelope(request_id, error={"code": -32001, "message": denied, "data": {"sent": secret}})
        case "secret_output":
            return _result(request_id, _text(f"the header was {secret}, and {secret} again"))
        case "rpc_32000":
            return _envelope(request_id, error={"code": -32000, "message": "Connection closed"})
        case "deep":
            return _raw(request_id, f'{{"content":[],"structuredContent":{_nested(int(args["depth"]))}}}')
        case "surrogate":
            return _raw(request_id, '{"content":[{"type":"text","text":"a\\ud800b"}]}')
        case "bigint":
            return _raw(request_id, f'{{"content":[],"structuredContent":{{"n":{"7" * 5000}}}}}')
        case "result_array":
            return _raw(request_id, "[1, 2]")
        case "result_string":
            return _raw(request_id, '"done"')
        case "result_null":
            return _raw(request_id, "null")
        case "result_missing":
            return _envelope(request_id)
        case "no_content":
            return _result(request_id, {"foo": 1})
        case "content_string":
            return _result(request_id, {"content": "str"})
        case "unknown_block":
            return _result(request_id, {"content": [{"type": "hologram", "data": "?"}]})
        case "huge":
            return _result(request_id, _text("x" * int(args["size"])))
        case "many_blocks":
            return _result(request_id, {"content": [{"type": "text", "text": "b"}] * int(args["count"])})
        case "http_500":
            return (500, b"internal error")
        case (
            "stderr_long_line"
            | "stderr_flood"
            | "stdout_banner"
            | "stderr_secret_at_cut"
            | "exit_mid_call"
            | "close_stdout"
            | "busy"
        ):
            return _result(request_id, _text("done"))
        case _:
            return _envelope(request_id, error={"code": -32602, "message": f"unknown tool {tool}"})


TOOLS = [
    "ok",
    "secret_uncoded",
    "secret_coded",
    "secret_in_code",
    "secret_rpc",
    "secret_output",
    "rpc_32000",
    "deep",
    "surrogate",
    "bigint",
    "result_array",
    "result_string",
    "result_null",
    "result_missing",
    "no_content",
    "content_string",
    "unknown_block",
    "huge",
    "many_blocks",
    "http_500",
    "stderr_long_line",
    "stderr_flood",
    "stdout_banner",
    "stderr_secret_at_cut",
    "exit_mid_call",
    "close_stdout",
    "busy",
]
_ARGUMENTS = {
    "text": {"type": "string"},
    "depth": {"type": "integer"},
    "size": {"type": "integer"},
    "count": {"type": "integer"},
    "key": {"type": "string"},
}
STDERR_CUT = 2_000
"""Where raydag cuts a stderr line (``actors.calls.mcp.stdio.STDERR_LINE_CHARS``)."""
SLEEP_S = 600


def handle(
    message: dict[str, Any], secret: str, on_call: Callable[[str, dict[str, Any]], None]
) -> Answer | None:
    """The answer to one client message, ``None`` for a notification."""
    request_id, method = message.get("id"), message.get("method")
    if request_id is None:
        return None
    match method:
        case "initialize":
            return _result(
                request_id,
                {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "1"},
                },
            )
        case "tools/list":
            tools = [
                {
                    "name": name,
                    "description": f"The hostile server's {name}; it was sent {secret}.",
                    "inputSchema": {"type": "object", "properties": _ARGUMENTS},
                    "annotations": {"readOnlyHint": True},
                }
                for name in TOOLS
            ]
            return _result(request_id, {"tools": tools})
        case "ping":
            return _result(request_id, {})
        case "tools/call":
            params = message.get("params") or {}
            tool, args = params.get("name", ""), params.get("arguments") or {}
            on_call(tool, args)
            return answer(request_id, tool, args, secret)
        case _:
            return _envelope(request_id, error={"code": -32601, "message": f"no method {method}"})


def run_stdio() -> None:
    secret = os.environ.get("HOSTILE_SECRET", "")
    state = os.environ.get("HOSTILE_STATE")
    out = sys.stdout.buffer
    err = sys.stderr

    def note(line: str) -> None:
        if state:
            with open(state, "a", encoding="utf-8") as handle_:
                handle_.write(f"{os.getpid()} {line}\n")

    def on_call(tool: str, args: dict[str, Any]) -> None:
        key = str(args.get("key", "-"))
        if tool == "busy":  # a child in its group, and both busy for good
            child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({SLEEP_S})"])
            note(f"{tool} {key} child={child.pid}")
            time.sleep(SLEEP_S)
            return
        note(f"{tool} {key}")
        if tool == "exit_mid_call" and _asked(state, tool, key) == 1:
            os._exit(1)
        elif tool == "close_stdout":
            os.close(1)
            time.sleep(SLEEP_S)
        elif tool == "stderr_secret_at_cut":
            err.write("P" * (STDERR_CUT - 4) + secret + "\n")
            err.flush()
        elif tool == "stderr_long_line":
            err.write(f"{secret} " + "e" * (2 << 20) + "\n")
            err.flush()
        elif tool == "stderr_flood":
            line = f"flood {secret} " + "f" * 90 + "\n"
            for _ in range(200_000):
                err.write(line)
            err.flush()
        elif tool == "stdout_banner":
            out.write(b"hostile server says hello on stdout\n")
            out.flush()

    print(f"hostile server ready; my secret is {secret}", file=err, flush=True)
    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        reply = handle(message, secret, on_call)
        if isinstance(reply, tuple):
            reply = _envelope(message.get("id"), error={"code": -32603, "message": "a status only HTTP has"})
        if reply is not None:
            out.write(reply + b"\n")
            out.flush()


def _asked(state: str | None, tool: str, key: str) -> int:
    """How often ``tool`` was asked for ``key``, by any process, this call included."""
    if not state:
        return 1
    with open(state, encoding="utf-8") as handle_:
        return sum(line.split()[1:3] == [tool, key] for line in handle_)


def http_app() -> Any:
    """The server over Streamable HTTP at ``/mcp``. It names a session on ``initialize`` (as a stateful server
    does), so the client asks for the event stream, which it refuses (405). ``app.calls`` lists each method it
    was asked (``tools/call:<tool>`` for calls), ``app.gets`` counts the refused event-stream GETs."""
    calls: list[str] = []
    gets: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            gets.append(1)
            await _respond(send, 405, b"", b"text/plain")
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = dict(scope.get("headers", []))
        secret = headers.get(b"authorization", b"").decode().removeprefix("Bearer ")
        message = json.loads(body)
        calls.append(str(message.get("method")))
        reply = handle(message, secret, lambda tool, _args: calls.append(f"tools/call:{tool}"))
        session = (
            [(b"mcp-session-id", uuid.uuid4().hex.encode())] if message.get("method") == "initialize" else []
        )
        if reply is None:
            await _respond(send, 202, b"", b"text/plain")
        elif isinstance(reply, tuple):
            await _respond(send, reply[0], reply[1], b"text/plain")
        else:
            await _respond(send, 200, reply, b"application/json", session)

    app.calls = calls  # type: ignore[attr-defined]
    app.gets = gets  # type: ignore[attr-defined]
    return app


async def _respond(
    send: Any, status: int, body: bytes, content_type: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-type", content_type), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    run_stdio()

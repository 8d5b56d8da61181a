"""A small MCP server of the tests' own, over stdio (``python tests/integration/toy_mcp_server.py``) or as an
ASGI app behind a bearer check (``bearer_app``): a slow tool to die under, one that waits for a file, an
echo, and its pid; an answer and a failure holding NUL; an answer nested as deep as asked; a list of as many
items as asked (for a ``for_each``); a tool that asks its client to confirm mid-call (a form elicitation) and
fails ``NOT_CONFIRMED`` unless it did, and one that asks its client to open a link (a URL elicitation).
``TOY_ECHO_DESCRIPTION`` changes the echo tool's description (a server changing a tool under a run)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel


class Echoed(BaseModel):
    text: str
    pid: int


def _echo_description() -> str:
    """``TOY_ECHO_DESCRIPTION``, or the text of the file ``TOY_ECHO_DESCRIPTION_FILE`` names when it exists
    (a test changes it under a supervisor, whose next listing starts a new server process)."""
    path = os.environ.get("TOY_ECHO_DESCRIPTION_FILE")
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    return os.environ.get("TOY_ECHO_DESCRIPTION", "Echo the text back, with this server's pid.")


class Worded(BaseModel):
    words: str


class Listed(BaseModel):
    items: list[str]


class Noted(BaseModel):
    key: str | None
    """The ``io.raydag/operation-id`` the request's ``_meta`` carried: the note's idempotency key."""
    written: bool
    """Whether this call wrote the note (``False``: a note under this key was written before)."""


class Found(BaseModel):
    found: bool


class Seal(BaseModel):
    seal: bool


def _answered(text: str, *, code: str | None = None) -> CallToolResult:
    """A tool's result; with ``code``, its refusal, the code where raydag reads one (``{"error": {...}}``)."""
    if code is None:
        return CallToolResult(content=[TextContent(type="text", text=text)])
    error = {"error": {"code": code, "message": text}}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(error))], structured_content=error, is_error=True
    )


def _reshaped() -> bool:
    """Whether ``TOY_SHAPE_FILE`` names an existing file: then ``shaped`` answers in another shape (a server
    whose tool changed after raydag pinned it, restarted under a caller that still calls it)."""
    path = os.environ.get("TOY_SHAPE_FILE")
    return bool(path) and os.path.exists(path)  # type: ignore[arg-type]


def build() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("raydag-toy", log_level="WARNING")

    if _reshaped():

        @server.tool(name="shaped", description="Answer in words.")
        async def shaped_in_words(text: str) -> Worded:
            return Worded(words=text)

    else:

        @server.tool(description="Answer with the text.")
        async def shaped(text: str) -> Echoed:
            return Echoed(text=text, pid=os.getpid())

    @server.tool(description=_echo_description())
    async def echo(text: str) -> Echoed:
        return Echoed(text=text, pid=os.getpid())

    @server.tool(description="Wait until the file exists, then answer. Creates <path>.waiting on arrival.")
    async def wait_for_file(path: str) -> Echoed:
        await asyncio.to_thread(Path(f"{path}.waiting").touch)  # a test's sign that the call is in flight
        while not await asyncio.to_thread(os.path.exists, path):  # noqa: ASYNC110 (a file, not an event)
            await asyncio.sleep(0.05)
        return Echoed(text="there", pid=os.getpid())

    @server.tool(description="Wait, then answer.")
    async def sleep(seconds: float) -> Echoed:
        await asyncio.sleep(seconds)
        return Echoed(text="slept", pid=os.getpid())

    @server.tool(description="Answer with the text around a NUL, as a tool reading a binary file might.")
    async def with_nul(text: str) -> Echoed:
        return Echoed(text=f"{text}\x00{text}", pid=os.getpid())

    @server.tool(description="Fail, naming the text around a NUL.")
    async def failing_with_nul(text: str) -> Echoed:
        raise ToolError(f"cannot read {text}\x00{text}")

    @server.tool(description="Answer with a value nested `depth` levels deep, as a hostile server might.")
    async def nested(depth: int) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for _ in range(depth - 1):
            value = {"a": value}
        return value

    @server.tool(description="Answer with `count` short strings, for a plan to iterate.")
    async def items(count: int) -> Listed:
        return Listed(items=[f"i{n}" for n in range(count)])

    @server.tool(description="Append a note to the file TOY_NOTES names, once per _meta idempotency key.")
    def note(text: str, ctx: Context[Any, Any]) -> Noted:
        meta = ctx.request_context.meta or {}
        key = meta.get("io.raydag/operation-id")
        notes = Path(os.environ["TOY_NOTES"])
        lines = notes.read_text(encoding="utf-8").splitlines() if notes.exists() else []
        if key is not None and any(line.startswith(f"{key}\t") for line in lines):
            return Noted(key=key, written=False)
        with notes.open("a", encoding="utf-8") as handle:
            handle.write(f"{key}\t{text}\n")
        return Noted(key=key, written=True)

    @server.tool(description="Whether a note was written under an idempotency key.")
    def noted(key: str) -> Found:
        notes = Path(os.environ["TOY_NOTES"])
        lines = notes.read_text(encoding="utf-8").splitlines() if notes.exists() else []
        return Found(found=any(line.startswith(f"{key}\t") for line in lines))

    @server.tool(description="Ask the client to confirm sealing `bundle` (mid-call), then seal it.")
    async def confirm(bundle: str, ctx: Context[Any, Any]) -> CallToolResult:
        answer = await ctx.elicit(f"Seal {bundle}?", Seal)
        if answer.action != "accept" or not answer.data.seal:
            said = f"{bundle} was not sealed: the client answered {answer.action}"
            return _answered(said, code="NOT_CONFIRMED")
        return _answered(f"sealed {bundle}")

    @server.tool(description="Ask the client to open a link (mid-call), then say what it answered.")
    async def open_link(url: str, ctx: Context[Any, Any]) -> CallToolResult:
        answer = await ctx.elicit_url("Open this link to go on", url, f"link-{os.getpid()}")
        if answer.action != "accept":
            return _answered(f"the client answered {answer.action}", code="LINK_NOT_OPENED")
        return _answered("opened")

    return server


def http_app() -> Any:
    """The server over Streamable HTTP at ``/mcp``, stateless, asking for no credentials."""
    return build().streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True)


def bearer_app(secret: str) -> Any:
    """The server over Streamable HTTP, answering 401 to any request without ``Bearer <secret>``."""
    inner = http_app()
    expected = f"Bearer {secret}".encode()
    seen: list[bytes | None] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            header = dict(scope.get("headers", [])).get(b"authorization")
            seen.append(header)
            if header != expected:
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": b""})
                return
        await inner(scope, receive, send)

    app.seen = seen  # type: ignore[attr-defined]
    return app


if __name__ == "__main__":
    print("toy server ready", file=sys.stderr, flush=True)
    build().run("stdio")

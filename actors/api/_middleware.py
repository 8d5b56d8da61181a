"""Pure ASGI middleware of the run API: the request guard and the per-request deadline (no buffering of
responses, so the event stream stays live)."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import MutableHeaders

from actors.api._body import nests_deeper_than
from actors.api._problem import Problem
from actors.store.resilience import REQUEST_DEADLINE_S, deadline
from dag.plan import MAX_JSON_DEPTH

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    # An API answer is data, never a document: it may load, run or frame nothing. Pages (the run viewer)
    # set a policy of their own, which this one does not replace.
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
}


class RequestGuard:
    """The outermost layer: reads a request's body up to ``max_bytes`` (413 ``body-too-large`` whether its
    length was declared or it came chunked), refuses a JSON body nested deeper than ``MAX_JSON_DEPTH``
    (413 ``body-too-deep``) before anything parses it, and adds ``SECURITY_HEADERS`` to every answer.

    Both refusals come before authentication, as a size limit does: they protect the parsers, and say
    nothing about the API. Paths in ``opaque_paths`` (the MCP endpoint, which parses its own JSON-RPC) are
    only size-limited.
    """

    def __init__(self, app: Any, *, max_bytes: int, opaque_paths: tuple[str, ...] = ()) -> None:
        self._app = app
        self._max_bytes = max_bytes
        self._opaque_paths = opaque_paths

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        send = _with_headers(send)
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max_bytes:
            await self._refuse(
                scope, send, "body-too-large", f"the request body exceeds {self._max_bytes} bytes"
            )
            return
        body, end = await self._read_body(receive)
        if body is None:
            await self._refuse(
                scope, send, "body-too-large", f"the request body exceeds {self._max_bytes} bytes"
            )
            return
        if (
            scope["path"] not in self._opaque_paths
            and _is_json(scope)
            and nests_deeper_than(body, MAX_JSON_DEPTH)
        ):
            await self._refuse(
                scope, send, "body-too-deep", f"the request body nests deeper than {MAX_JSON_DEPTH} levels"
            )
            return
        await self._app(scope, _replaying(body, end, receive), send)

    async def _read_body(self, receive: Any) -> tuple[bytes | None, dict[str, Any] | None]:
        """The whole body (``None`` once it passes ``max_bytes``), and a disconnect that ended it early."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self._max_bytes:
                return None, None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    async def _refuse(self, scope: Any, send: Any, slug: str, detail: str) -> None:
        response = Problem(413, slug, detail).response(scope.get("path", ""))
        await response(scope, _disconnected, send)


class RequestDeadline:
    """Gives each request one ``REQUEST_DEADLINE_S`` for everything it waits on PostgreSQL and the supervisor
    for (see ``actors.store.resilience.deadline``); a route with a longer legitimate wait starts a new one after it."""

    def __init__(self, app: Any) -> None:
        self._app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        with deadline(REQUEST_DEADLINE_S):
            await self._app(scope, receive, send)


def _is_json(scope: Any) -> bool:
    """Whether FastAPI would parse the body as JSON: no content type, ``application/json`` or ``…+json``."""
    headers: dict[bytes, bytes] = dict(scope.get("headers", []))
    content_type = headers.get(b"content-type")
    if content_type is None:
        return True
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def _replaying(body: bytes, end: dict[str, Any] | None, receive: Any) -> Any:
    """A ``receive`` that gives the app the body already read, then (for disconnects) the client's own."""
    pending = [{"type": "http.request", "body": body, "more_body": False}] if end is None else [end]

    async def replay() -> Any:
        return pending.pop() if pending else await receive()

    return replay


def _with_headers(send: Any) -> Any:
    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in SECURITY_HEADERS.items():
                if name not in headers:
                    headers[name] = value
        await send(message)

    return sending


async def _disconnected() -> dict[str, Any]:
    return {"type": "http.disconnect"}

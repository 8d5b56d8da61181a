"""What the transport tells about a call that the server's messages cannot: lost connections, refused
requests, answers too large to read. A server chooses its error codes and texts; it cannot choose these.

- ``CallWatch`` is the current call's record (a context variable: the SDK sends each request of a call in a
  copy of the caller's context), written by the HTTP client's hooks: each refusal with its request, a
  transport error on any of its requests, an answer cut off at the call's bound.
- ``watch_response`` is an ``httpx2`` response hook: it notes refusals, and counts each response body as it
  is read and stops it past ``CallWatch.max_answer_bytes`` (an event stream: per event), so an answer of any
  size costs at most that much memory.
- ``Link`` is one session's connection as its transport knows it: whether it has ended and, for a transport
  that reads its answers itself (stdio), which requests of which calls were waiting on it then. It is told
  before the session is, so a call whose request was cut off is known as such whatever the session raises.
- ``watched`` wraps an SDK transport so that the end of its read stream — the session's connection gone —
  is noted in a ``Link`` before the session hears of it.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import anyio
import httpx2
from mcp.client._transport import Transport, TransportStreams
from mcp.shared._stream_protocols import ReadStream
from mcp.shared.message import SessionMessage
from mcp_types import ElicitRequestParams, ElicitResult, RequestId

DEFAULT_ANSWER_BYTES = 16 << 20
"""The bound on a response read outside a call (a listing, a session's own requests)."""


@dataclass(frozen=True)
class Refusal:
    """An HTTP error status a server answered one request of a call with."""

    status: int
    challenge: str
    """The response's ``WWW-Authenticate`` (an insufficient scope says so there)."""
    method: str
    """The JSON-RPC method of the refused POST (``tools/call``, ``initialize``, …), or the HTTP method."""


@dataclass
class CallWatch:
    """What the transport saw of one call."""

    token: str | None = None
    """The call's own task token, sent on each of its requests to a raydag-token server."""
    max_answer_bytes: int = DEFAULT_ANSWER_BYTES
    refusals: list[Refusal] = field(default_factory=list)
    lost: bool = False
    """A request of this call failed in the transport (connection refused, reset, cut mid-answer)."""
    cut_off: bool = False
    """A request of this call was waiting on a connection that ended before it was answered (``Link.lose``):
    no answer can come, whatever the session then raises."""
    too_large: int | None = None
    """The bytes read of an answer stopped at ``max_answer_bytes``."""

    def refusal(self) -> Refusal | None:
        """The refusal that stands for the call: that of its ``tools/call`` request, else the last refused
        POST. A GET refused is the server declining the optional event stream, never the call's answer."""
        posts = [refusal for refusal in self.refusals if refusal.method != "GET"]
        calls = [refusal for refusal in posts if refusal.method == "tools/call"]
        chosen = calls or posts
        return chosen[-1] if chosen else None


current_call: ContextVar[CallWatch | None] = ContextVar("raydag_mcp_call", default=None)


class QuestionHold(Protocol):
    """A plain call that can wait for a person's answer to its server's question."""

    async def ask(self, request_id: RequestId, params: ElicitRequestParams) -> ElicitResult: ...


current_hold: ContextVar[QuestionHold | None] = ContextVar("raydag_mcp_question_hold", default=None)
"""The plain call a server's question mid-call belongs to, where a person may answer it
(``actors.calls.mcp.held_calls``): set in the call's context, which the SDK hands the elicitation callback of a
request's own event stream. A session's own tasks start without it (``actors.calls.mcp.session``), so a
question that arrives anywhere else belongs to no call."""


class AnswerTooLarge(httpx2.StreamError):
    """A response body went past its call's bound. A ``StreamError``: the SDK then fails the request it
    answered at once (a parse error) instead of waiting for it."""


async def watch_response(response: httpx2.Response) -> None:
    """An ``httpx2`` response hook: note a refusal in the current call's watch, and count the body as it is
    read, noting a transport error and stopping it past the call's bound."""
    watch = current_call.get()
    if watch is not None:
        _note_refusal(watch, response)
    event_stream = response.headers.get("content-type", "").lower().startswith("text/event-stream")
    response.stream = _Bounded(response.stream, watch, event_stream)


def _note_refusal(watch: CallWatch, response: httpx2.Response) -> None:
    """400 and 404 carry a JSON-RPC error, which the SDK raises as it is and which says more than a status."""
    if response.status_code < 400 or response.status_code in (400, 404):
        return
    request = response.request
    method = request.method
    if method == "POST":
        method = request.headers.get("mcp-method") or _rpc_method(request.content) or method
    challenge = response.headers.get("www-authenticate", "")
    watch.refusals.append(Refusal(response.status_code, challenge, method))


def _rpc_method(body: bytes) -> str | None:
    try:
        message = json.loads(body)
    except ValueError:
        return None
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None


class _Bounded(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, watch: CallWatch | None, event_stream: bool) -> None:
        self._inner = inner
        self._watch = watch
        self._limit = watch.max_answer_bytes if watch is not None else DEFAULT_ANSWER_BYTES
        self._event_stream = event_stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        try:
            async for chunk in self._inner:
                boundary = chunk.rfind(b"\n\n") if self._event_stream else -1
                size = len(chunk) - boundary - 2 if boundary >= 0 else size + len(chunk)
                if size > self._limit:
                    if self._watch is not None:
                        self._watch.too_large = size
                    raise AnswerTooLarge(f"the answer is larger than {self._limit:,} bytes")
                yield chunk
        except httpx2.TransportError:
            if self._watch is not None:
                self._watch.lost = True
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


MAX_WAITING = 10_000
"""Requests a link remembers as waiting; the oldest are forgotten past this."""


@dataclass
class Link:
    """One session's connection, as its transport knows it."""

    lost: bool = False
    """The connection ended (its read stream, or its owner closed it): no answer will come over it any more."""
    waiting: OrderedDict[str, tuple[RequestId, CallWatch | None]] = field(default_factory=OrderedDict)
    """Requests written and not answered yet, by their id as text (a server may echo 42 as "42"), with the call
    each was sent for. Kept only by a transport that reads its answers itself (stdio)."""
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set with ``lost``."""

    def sending(self, request_id: RequestId, call: CallWatch | None) -> bool:
        """Note a request about to be written for ``call``; ``False``, and the call cut off, if the connection
        has ended (the request is not to be written)."""
        if self.lost:
            if call is not None:
                call.cut_off = True
            return False
        self.waiting[str(request_id)] = (request_id, call)
        if len(self.waiting) > MAX_WAITING:
            self.waiting.popitem(last=False)
        return True

    def settled(self, request_id: RequestId) -> None:
        """The request was answered (a response, an error, a fault the transport judged) or cancelled."""
        self.waiting.pop(str(request_id), None)

    def lose(self) -> None:
        """The connection has ended: every call still waiting on it is cut off. Told before the session is."""
        self.lost = True
        for _, call in self.waiting.values():
            if call is not None:
                call.cut_off = True
        self.waiting.clear()
        self.ended.set()


@asynccontextmanager
async def watched(transport: Transport, link: Link) -> AsyncIterator[TransportStreams]:
    """``transport``'s streams, the read one noting its end in ``link`` first."""
    async with transport as (read_stream, write_stream):
        yield _WatchedRead(read_stream, link), write_stream


class _WatchedRead:
    """A read stream that sets ``link.lost`` when it ends, before whoever reads it learns so."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], link: Link) -> None:
        self._inner = inner
        self._link = link

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item (the SDK's context-carrying streams have one)."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._link.lose()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

"""raydag's MCP client against the real server: connections are reused (a 2026-07-28 call is one POST), every call
still sends its own token, and every way a call can fail becomes a classified outcome."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors.calls.call import ToolCall, ToolOutcome
from actors.calls.mcp import McpConnections, call_tool, stateless_post
from actors.calls.task import _WorkerLoop
from dag.contracts import Risk, ToolContract
from dag.events import ErrorKind
from dag.storable import MAX_DEPTH
from mcp_server.auth import ASGIApp, Receive, Scope, Send
from mcp_server.contracts import CASEOPS_TOOLS, SCOPE_CASES, CaseInput, CaseSnapshot
from mcp_server.limits import TenantLimits
from mcp_server.tools import error_result
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_server import MODERN, serving

SNAPSHOT = "caseops_get_case_snapshot"
CASE_TOOLS = (
    "caseops_get_case_snapshot",
    "caseops_get_policy_requirements",
    "caseops_list_unclassified_documents",
)


class Recorder:
    """Notes each request's JSON-RPC method and the client connection it came on, then passes it on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.methods: list[str] = []
        self.connections: set[tuple[str, int]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        first = await receive()
        body = first.get("body", b"")
        self.methods.append(json.loads(body)["method"] if body else scope["method"])
        self.connections.add(tuple(scope["client"]))
        pending = [first]

        async def replay() -> Any:
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


@pytest.fixture
def recorded(dsn: str, token_key: bytes) -> Iterator[tuple[RunningToolServer, Recorder]]:
    recorders: list[Recorder] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        recorders.append(Recorder(app))
        return recorders[0]

    with serving(dsn, token_key, wrap=wrap) as server:
        yield server, recorders[0]


def call_of(server: RunningToolServer, tool: str, protocol: str = MODERN, **claims: Any) -> ToolCall:
    args = {"case_id": "C-102"}
    return ToolCall(
        "run", "node", 1, tool, args, server.url, server.token(tool, **claims), 10.0, protocol=protocol
    )


async def test_2026_calls_share_one_connection_and_are_one_request_each(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    async with McpConnections() as connections:
        outcomes = [await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS) for _ in range(5)]

    assert all(outcome.ok for outcome in outcomes)
    assert recorder.methods == ["tools/call"] * 5
    assert len(recorder.connections) == 1


async def test_a_connection_idle_past_the_keep_alive_is_not_reused_for_the_next_call(
    recorded: tuple[RunningToolServer, Recorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shortened from 4 s so the test need not wait: the server here keeps idle connections for 5 s.
    monkeypatch.setattr(stateless_post, "KEEPALIVE_S", 0.2)
    server, recorder = recorded
    async with McpConnections() as connections:
        first = await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS)
        await asyncio.sleep(0.6)  # idle past the client's keep-alive, not the server's
        second = await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS)

    assert (first.ok, second.ok) == (True, True)
    assert len(recorder.connections) == 2  # a connection of its own for the call after the pause


async def test_2026_calls_through_the_sdk_client_share_one_connection_and_list_the_tools_once(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    async with McpConnections(sdk_calls=True) as connections:
        outcomes = [await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS) for _ in range(5)]

    assert all(outcome.ok for outcome in outcomes)
    assert recorder.methods == ["tools/call", "tools/list", *["tools/call"] * 4]
    assert len(recorder.connections) == 1


async def test_concurrent_calls_on_shared_connections_each_send_their_own_token(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    calls = [call_of(server, tool) for tool in CASE_TOOLS * 4]
    async with McpConnections() as connections:
        outcomes = await asyncio.gather(*(connections.call(call, CASEOPS_TOOLS) for call in calls))

    # A token sent with the wrong call would answer TOKEN_NOT_FOR_TOOL, and a token sent twice HTTP 401.
    assert [outcome.error for outcome in outcomes] == [None] * len(calls)
    assert recorder.methods.count("tools/call") == len(calls)


async def test_2025_calls_open_a_session_each_over_kept_alive_connections(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    async with McpConnections() as connections:
        outcomes = [
            await connections.call(call_of(server, SNAPSHOT, "legacy"), CASEOPS_TOOLS) for _ in range(3)
        ]

    assert all(outcome.ok for outcome in outcomes)
    assert recorder.methods.count("initialize") == 3
    assert recorder.methods.count("tools/call") == 3
    assert len(recorder.methods) == 12
    # The SDK posts notifications/initialized without awaiting it, so the call after it may need a second
    # connection; still at most one new connection per session, not one per request.
    assert len(recorder.connections) <= 4


async def test_a_one_off_call_opens_and_closes_its_own_connections(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    outcomes = [await call_tool(call_of(server, SNAPSHOT), CASEOPS_TOOLS) for _ in range(2)]

    assert all(outcome.ok for outcome in outcomes)
    assert len(recorder.connections) == 2


def test_a_worker_loop_keeps_its_connections_from_one_task_to_the_next(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    server, recorder = recorded
    worker = _WorkerLoop()
    outcomes = [
        worker.run(call_tool(call_of(server, SNAPSHOT), CASEOPS_TOOLS, worker.connections)) for _ in range(3)
    ]
    worker.close()

    assert all(outcome.ok for outcome in outcomes)
    assert recorder.methods == ["tools/call"] * 3
    assert len(recorder.connections) == 1


async def test_a_session_is_rebuilt_after_the_server_went_away(dsn: str, token_key: bytes) -> None:
    async with McpConnections() as connections:
        with serving(dsn, token_key) as first:
            before = await connections.call(call_of(first, SNAPSHOT), CASEOPS_TOOLS)
            port = int(first.url.rsplit(":", 1)[1].split("/")[0])
        gone = await connections.call(call_of(first, SNAPSHOT), CASEOPS_TOOLS)
        with serving(dsn, token_key, port=port) as again:
            after = await connections.call(call_of(again, SNAPSHOT), CASEOPS_TOOLS)

    assert before.ok
    assert gone.error is not None
    assert (gone.error.kind, gone.error.code) == (ErrorKind.TRANSIENT, "CONNECTION_FAILED")
    assert after.ok, after.error


PROBE = ToolContract(
    name="probe_error",
    version="1.0.0",
    description="Answers an isError result whose structured code differs from its text.",
    scope=SCOPE_CASES,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=frozenset({"case_id"}),
    output_model=CaseSnapshot,
)


async def _disagreeing_error(claims: Any, args: Any) -> Any:
    result = error_result("STRUCTURED_CODE", "from structuredContent")
    result.content[0].text = json.dumps({"error": {"code": "TEXT_CODE", "message": "from the text"}})  # type: ignore[union-attr]
    return result


async def test_the_client_reads_the_error_code_from_structured_content_first(
    dsn: str, token_key: bytes
) -> None:
    with serving(dsn, token_key, extra_tools=[(PROBE, _disagreeing_error)]) as server:
        probe = call_of(server, SNAPSHOT)
        outcome = await call_tool(
            dataclasses.replace(
                probe, tool=PROBE.name, token=server.token(PROBE.name, scopes=frozenset({SCOPE_CASES}))
            ),
            {**CASEOPS_TOOLS, PROBE.name: PROBE},
        )

    assert outcome.error is not None
    assert (outcome.error.code, outcome.error.message) == ("STRUCTURED_CODE", "from structuredContent")
    assert outcome.error.kind is ErrorKind.BUSINESS


def _error(outcome: ToolOutcome) -> tuple[ErrorKind, str]:
    assert outcome.error is not None
    return outcome.error.kind, outcome.error.code


async def test_refusals_become_classified_outcomes(tool_server: RunningToolServer) -> None:
    replayed = call_of(tool_server, SNAPSHOT)
    narrow = call_of(tool_server, "caseops_get_policy_requirements", scopes=frozenset({SCOPE_CASES}))
    invalid = dataclasses.replace(call_of(tool_server, SNAPSHOT), args={"case_id": "C-102", "x": 1})
    async with McpConnections() as connections:
        first = await connections.call(replayed, CASEOPS_TOOLS)
        again = await connections.call(replayed, CASEOPS_TOOLS)
        scope = await connections.call(narrow, CASEOPS_TOOLS)
        rejected = await connections.call(invalid, CASEOPS_TOOLS)
        unknown = await connections.call(
            ToolCall("r", "n", 1, "no_such_tool", {}, tool_server.url, tool_server.token(SNAPSHOT), 10),
            CASEOPS_TOOLS,
        )

    assert first.ok
    assert _error(again) == (ErrorKind.AUTHORIZATION, "HTTP_401")
    assert _error(scope) == (ErrorKind.AUTHORIZATION, "INSUFFICIENT_SCOPE")
    assert _error(rejected) == (ErrorKind.CONTRACT, "INVALID_ARGUMENTS")
    assert _error(unknown) == (ErrorKind.CONTRACT, "JSONRPC_-32602")


async def test_a_rate_limited_call_is_transient(dsn: str, token_key: bytes) -> None:
    with serving(dsn, token_key, tenant_limits=TenantLimits(rate_per_s=0.01, burst=1)) as server:
        async with McpConnections() as connections:
            first = await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS)  # one request
            limited = await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS)

    assert first.ok
    assert _error(limited) == (ErrorKind.TRANSIENT, "HTTP_429")


async def test_a_cancelled_call_leaves_as_a_cancellation_not_a_client_error(
    dsn: str, token_key: bytes
) -> None:
    arrived, released = threading.Event(), threading.Event()  # the server answers on a thread of its own

    def wrap(app: ASGIApp) -> ASGIApp:
        async def held(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                arrived.set()
                await asyncio.to_thread(released.wait, 60)  # no answer until the caller has given up
            await app(scope, receive, send)

        return held

    with serving(dsn, token_key, wrap=wrap) as server:
        try:
            async with McpConnections() as connections:
                call = asyncio.ensure_future(connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS))
                assert await asyncio.to_thread(arrived.wait, 30)
                call.cancel()
                # A cancellation is not an outcome to record: it leaves as itself, not as a client error.
                with pytest.raises(asyncio.CancelledError):
                    await call
        finally:
            released.set()


async def test_a_toolset_server_pinned_to_2026_gets_one_request_per_call_and_the_sdk_path_asks_first(
    recorded: tuple[RunningToolServer, Recorder],
) -> None:
    from actors.launch.settings import shipped_toolsets

    server, recorder = recorded
    caseops = shipped_toolsets(server.url).servers  # pinned to 2026-07-28, raydag's task tokens

    def calls() -> list[ToolCall]:  # a task token is good for one call
        return [dataclasses.replace(call_of(server, SNAPSHOT), server="caseops") for _ in range(3)]

    async with McpConnections(caseops) as connections:
        direct = [await connections.call(call, CASEOPS_TOOLS) for call in calls()]
    direct_methods, recorder.methods[:] = list(recorder.methods), []
    async with McpConnections(caseops, sdk_calls=True) as connections:
        through_sdk = [await connections.call(call, CASEOPS_TOOLS) for call in calls()]

    assert [outcome.output for outcome in direct] == [outcome.output for outcome in through_sdk]
    assert all(outcome.ok for outcome in direct)
    assert direct_methods == ["tools/call"] * 3  # no listing, no session: one POST each
    assert recorder.methods == ["tools/list", *["tools/call"] * 3]  # the SDK lists first, for Mcp-Param-*


async def test_a_raydag_token_server_asking_for_input_fails_the_call_as_a_protocol_error_sent_once(
    dsn: str, token_key: bytes
) -> None:
    """One POST per call has no way to answer a request for input; re-sending would reuse a one-call token."""
    from actors.launch.settings import shipped_toolsets

    posts: list[bytes] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        async def asking(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            request = json.loads((await receive())["body"])
            posts.append(request["method"].encode())
            body = {
                "jsonrpc": "2.0",
                "id": request["id"],
                "result": {
                    "resultType": "input_required",
                    "inputRequests": {},
                    "requestState": "s",
                    "content": [],
                },
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})

        return asking

    with serving(dsn, token_key, wrap=wrap) as server:
        call = dataclasses.replace(call_of(server, SNAPSHOT), server="caseops")
        async with McpConnections(shipped_toolsets(server.url).servers) as connections:
            outcome = await connections.call(call, CASEOPS_TOOLS)

    assert outcome.error is not None
    assert outcome.error.kind is ErrorKind.PROTOCOL
    assert "input_required" in outcome.error.message
    assert posts == [b"tools/call"]


def _answering(status: int, content_type: str, body: Callable[[int], bytes]) -> Callable[[ASGIApp], ASGIApp]:
    """A server that answers every POST with ``status``, ``content_type`` and ``body(request_id)``."""

    def wrap(app: ASGIApp) -> ASGIApp:
        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            request = json.loads((await receive())["body"])
            headers = [(b"content-type", content_type.encode())]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body(request["id"])})

        return answer

    return wrap


def _result(request_id: int) -> dict[str, Any]:
    snapshot = CaseSnapshot(
        case_id="C-102",
        version=1,
        status="open",
        policy_id="P-1",
        policy_version="1",
        submitted_at="2026-12-01T00:00:00Z",  # type: ignore[arg-type]
        received_document_codes=[],
        evidence_ref="case://C-102@1",
    ).model_dump(mode="json")
    content = [{"type": "text", "text": json.dumps(snapshot)}]
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": content, "structuredContent": snapshot}}


def _nested_answer(request_id: int, depth: int) -> bytes:
    """The snapshot's answer with one more field, an object ``depth`` levels deep (the whole output one more)."""
    nested = '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)
    answer = json.dumps(_result(request_id)).replace(
        '"structuredContent": {', f'"structuredContent": {{"x": {nested}, ', 1
    )
    return answer.encode()


@pytest.mark.parametrize(
    ("status", "content_type", "body", "expected"),
    [
        # An answer framed as an event stream, after an event for another request, is still the answer.
        (
            200,
            "text/event-stream",
            lambda rid: (
                f"event: message\ndata: {json.dumps({**_result(rid), 'id': rid + 1})}\n\n"
                f"event: message\ndata: {json.dumps(_result(rid))}\n\n"
            ).encode(),
            None,
        ),
        (200, "text/event-stream", lambda rid: b": nothing\n\n", (ErrorKind.PROTOCOL, "JSONRPC_-32603")),
        # A 400 or 404 says more with a JSON-RPC error; without one, the status is what there is to say.
        (400, "text/html", lambda rid: b"<h1>Bad Request</h1>", (ErrorKind.PROTOCOL, "HTTP_400")),
        (404, "application/json", lambda rid: b"{}", (ErrorKind.PROTOCOL, "HTTP_404")),
        (
            404,
            "application/json",
            lambda rid: json.dumps(
                {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}}
            ).encode(),
            (ErrorKind.PROTOCOL, "JSONRPC_-32601"),
        ),
        (503, "text/plain", lambda rid: b"busy", (ErrorKind.TRANSIENT, "HTTP_503")),
        (200, "application/json", lambda rid: b"[1]", (ErrorKind.PROTOCOL, "JSONRPC_-32603")),
        (
            200,
            "application/json",
            lambda rid: json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": "no list"}}).encode(),
            (ErrorKind.PROTOCOL, "MALFORMED_ANSWER"),
        ),
        # Parsed, but nested past what a run records (and reads back): refused before the schema sees it.
        (
            200,
            "application/json",
            lambda rid: _nested_answer(rid, MAX_DEPTH),
            (ErrorKind.PROTOCOL, "OUTPUT_UNSTORABLE"),
        ),
        # Nested past the parser's own frames.
        (
            200,
            "application/json",
            lambda rid: _nested_answer(rid, 100_000),
            (ErrorKind.PROTOCOL, "OUTPUT_UNSTORABLE"),
        ),
        # A refusal whose body cannot be read is a refusal all the same.
        (404, "application/json", lambda rid: _nested_answer(rid, 100_000), (ErrorKind.PROTOCOL, "HTTP_404")),
    ],
    ids=[
        "sse",
        "sse-without-answer",
        "400-html",
        "404-empty",
        "404-jsonrpc",
        "503",
        "not-a-message",
        "not-a-result",
        "nested-past-the-limit",
        "nested-past-the-parser",
        "404-nested-past-the-parser",
    ],
)
async def test_a_one_post_answer_is_read_whatever_its_framing_and_a_bare_refusal_by_its_status(
    dsn: str, token_key: bytes, status: int, content_type: str, body: Any, expected: Any
) -> None:
    with serving(dsn, token_key, wrap=_answering(status, content_type, body)) as server:
        async with McpConnections() as connections:
            outcome = await connections.call(call_of(server, SNAPSHOT), CASEOPS_TOOLS)

    if expected is None:
        assert outcome.ok, outcome.error
        assert outcome.output["case_id"] == "C-102"
    else:
        assert _error(outcome) == expected

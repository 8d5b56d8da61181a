"""The HTTP guard, driven as an ASGI app: the order of its checks, and what reaches the app behind it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from mcp.server.transport_security import TransportSecuritySettings

from dag.tokens import TaskClaims, TaskTokens
from mcp_server.auth import current_claims
from mcp_server.guard import McpGuard
from mcp_server.limits import Admission, TenantLimits
from tests.loopback import free_port

PORT = free_port()  # the guard is driven by ASGI scopes alone; the port is only what the scope says
AUDIENCE = f"http://127.0.0.1:{PORT}/mcp"
TOKENS = TaskTokens(key=b"k" * 32, audience=AUDIENCE)
SECURITY = TransportSecuritySettings(
    enable_dns_rebinding_protection=True,
    allowed_hosts=["127.0.0.1:*"],
    allowed_origins=["http://127.0.0.1:*"],
)
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "snapshot", "arguments": {}}}


def token(scopes: frozenset[str] = frozenset({"cases:read"}), tool: str = "snapshot") -> str:
    return TOKENS.mint(
        subject="s", tenant_id="t1", task_id="r/n/1", resource={"case_id": "C-1"}, tool=tool, scopes=scopes
    )


class Uses:
    """An in-memory replay cache; ``broken`` makes it fail like an unreachable database."""

    def __init__(self, *, broken: bool = False) -> None:
        self.seen: set[str] = set()
        self.broken = broken

    async def first_use(self, claims: TaskClaims) -> bool:
        if self.broken:
            raise ConnectionError("database unreachable")
        first = claims.jti not in self.seen
        self.seen.add(claims.jti)
        return first


class App:
    """Records what the guard lets through, then answers 200."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.claims: list[TaskClaims | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(dict(scope))
        self.claims.append(current_claims.get())
        self.bodies.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def guard(
    app: App,
    *,
    uses: Uses | None = None,
    limits: TenantLimits | None = None,
    auth: bool = True,
    max_body: int = 1024,
) -> McpGuard:
    return McpGuard(
        app,
        tokens=TOKENS if auth else None,
        security=SECURITY,
        max_body_bytes=max_body,
        scope_of_tool={"snapshot": "cases:read"},
        admission=Admission(limits or TenantLimits()),
        replay=uses or Uses(),
    )


def request(
    target: McpGuard,
    body: bytes | Mapping[str, Any] = CALL,
    *,
    bearer: str | None = None,
    headers: Mapping[str, str] | None = None,
    server: tuple[str, int] = ("127.0.0.1", PORT),
    chunks: int = 1,
) -> tuple[int, dict[str, str], bytes]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"host": f"127.0.0.1:{PORT}", "content-type": "application/json", **(headers or {})}
    if bearer is not None:
        sent["authorization"] = f"Bearer {bearer}"
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(name.encode(), value.encode()) for name, value in sent.items()],
        "server": server,
    }
    size = -(-len(raw) // chunks) or 1
    parts = [raw[start : start + size] for start in range(0, len(raw), size)] or [b""]
    messages = [
        {"type": "http.request", "body": part, "more_body": index < len(parts) - 1}
        for index, part in enumerate(parts)
    ]
    answer: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        answer.append(message)

    asyncio.run(target(scope, receive, send))
    start = answer[0]
    response_headers = {bytes(name).decode(): bytes(value).decode() for name, value in start["headers"]}
    return start["status"], response_headers, b"".join(message.get("body", b"") for message in answer[1:])


def test_the_app_gets_the_body_and_the_claims_but_never_the_token() -> None:
    app = App()
    status, _, _ = request(guard(app), CALL, bearer=token(), chunks=3)

    assert status == 200
    assert app.bodies == [json.dumps(CALL).encode()]
    assert all(name != b"authorization" for name, _ in app.scopes[0]["headers"])
    claims = app.claims[0]
    assert claims is not None
    assert (claims.tenant_id, claims.tool) == ("t1", "snapshot")


def test_a_rebinding_request_is_refused_before_its_token_is_looked_at() -> None:
    app = App()
    status, _, _ = request(guard(app), headers={"host": "attacker.example"})

    assert status == 421
    assert app.scopes == []


def test_a_body_over_the_cap_is_413_whether_declared_or_streamed() -> None:
    app = App()
    large = json.dumps({**CALL, "padding": "x" * 2048}).encode()
    declared = request(guard(app), large, bearer=token(), headers={"content-length": str(len(large))})
    streamed = request(guard(app), large, bearer=token(), chunks=4)

    assert declared[0] == streamed[0] == 413
    assert app.scopes == []


def test_an_ambiguous_body_is_a_json_rpc_error_with_400() -> None:
    app = App()
    status, _, body = request(
        guard(app), b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]', bearer=token()
    )

    assert status == 400
    assert json.loads(body)["error"]["code"] == -32600
    assert app.scopes == []


def test_no_token_is_401_and_a_missing_scope_403_with_the_scope_named() -> None:
    app = App()
    missing = request(guard(app))
    narrow = request(guard(app), bearer=token(scopes=frozenset({"documents:read"})))

    assert missing[0] == 401
    assert missing[1]["www-authenticate"] == 'Bearer realm="raydag-mcp"'
    assert narrow[0] == 403
    assert narrow[1]["www-authenticate"].startswith('Bearer error="insufficient_scope", scope="cases:read"')
    assert app.scopes == []


def test_a_replayed_call_is_401_but_a_list_with_a_used_token_passes() -> None:
    app, uses = App(), Uses()
    used = token()
    target = guard(app, uses=uses)
    first = request(target, bearer=used)
    second = request(target, bearer=used)
    listing = request(target, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, bearer=used)

    assert (first[0], second[0], listing[0]) == (200, 401, 200)
    assert "already used" in json.loads(second[2])["error_description"]


def test_without_the_replay_cache_no_tool_runs() -> None:
    app = App()
    status, headers, _ = request(guard(app, uses=Uses(broken=True)), bearer=token())

    assert (status, headers["retry-after"]) == (503, "1")
    assert app.scopes == []


def test_a_tenant_over_its_rate_is_429_and_its_slot_is_freed_after_each_request() -> None:
    app = App()
    target = guard(app, limits=TenantLimits(max_in_flight=1, rate_per_s=1, burst=2))
    answers = [request(target, bearer=token()) for _ in range(3)]

    assert [answer[0] for answer in answers] == [200, 200, 429]
    assert answers[2][1]["retry-after"] == "1"


def test_a_refused_call_does_not_use_up_its_token() -> None:
    app, uses = App(), Uses()
    target = guard(app, uses=uses, limits=TenantLimits(rate_per_s=0.001, burst=1))
    request(target, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, bearer=token())
    refused = request(target, bearer=token())

    assert refused[0] == 429
    assert uses.seen == set()


@pytest.mark.parametrize(("server", "status"), [(("127.0.0.1", PORT), 200), (("10.1.2.3", PORT), 403)])
def test_without_auth_only_a_loopback_socket_is_served(server: tuple[str, int], status: int) -> None:
    app = App()
    answer = request(guard(app, auth=False), server=server)

    assert answer[0] == status
    assert app.claims == ([None] if status == 200 else [])

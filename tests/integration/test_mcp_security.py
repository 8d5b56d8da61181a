"""The MCP server's HTTP guard over real HTTP and real PostgreSQL: replay protection, scopes, DNS rebinding,
the body cap, per-tenant limits, and logs that never hold a token or an argument."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from pydantic import BaseModel

from dag.contracts import Risk, ToolContract
from dag.tokens import TaskClaims, TaskTokens
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import SCOPE_CASES, CaseInput
from mcp_server.limits import TenantLimits
from mcp_server.replay import ReplayCache
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_server import LEGACY, MODERN, rpc, serving

SNAPSHOT = {"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102"}}


def call_snapshot(server: RunningToolServer, token: str, era: str = MODERN) -> httpx.Response:
    return rpc(server.url, token, "tools/call", SNAPSHOT, era=era)


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_token_is_accepted_for_one_tool_call_only(tool_server: RunningToolServer, era: str) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    before = tool_server.server.executions.get(("tenant-demo", "C-102", "caseops_get_case_snapshot"), 0)

    first = call_snapshot(tool_server, token, era)
    replayed = call_snapshot(tool_server, token, era)

    assert first.status_code == 200
    assert first.json()["result"]["structuredContent"]["case_id"] == "C-102"
    assert replayed.status_code == 401
    assert replayed.headers["www-authenticate"].startswith('Bearer realm="raydag-mcp", error="invalid_token"')
    assert "already used" in replayed.json()["error_description"]
    after = tool_server.server.executions[("tenant-demo", "C-102", "caseops_get_case_snapshot")]
    assert after == before + 1


def test_listing_does_not_use_up_a_token(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")

    listed = [rpc(tool_server.url, token, "tools/list").status_code for _ in range(3)]
    called = call_snapshot(tool_server, token)

    assert listed == [200, 200, 200]
    assert called.status_code == 200


async def test_concurrent_replays_of_one_token_run_the_tool_once(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")

    key = ("tenant-demo", "C-102", "caseops_get_case_snapshot")
    before = tool_server.server.executions.get(key, 0)

    statuses = await asyncio.gather(*(asyncio.to_thread(call_snapshot, tool_server, token) for _ in range(6)))

    assert sorted(response.status_code for response in statuses) == [200, 401, 401, 401, 401, 401]
    assert tool_server.server.executions[key] == before + 1  # counted by the server, not by the answers


def test_a_token_used_on_one_replica_is_refused_by_another(dsn: str, token_key: bytes) -> None:
    audience = "http://mcp.replicas.test/mcp"
    with (
        serving(dsn, token_key, audience=audience) as first,
        serving(dsn, token_key, audience=audience) as second,
    ):
        token = first.token("caseops_get_case_snapshot")
        used = call_snapshot(first, token)
        replayed = call_snapshot(second, token)
        fresh = call_snapshot(second, second.token("caseops_get_case_snapshot"))

    assert used.status_code == 200
    assert replayed.status_code == 401
    assert fresh.status_code == 200


async def test_the_replay_cache_keeps_live_tokens_and_prunes_expired_ones(dsn: str) -> None:
    now = int(time.time())
    live, stale = _claims(expires=now + 60), _claims(expires=now - 120)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        cache = ReplayCache(lambda: pool)
        firsts = [await cache.first_use(live), await cache.first_use(stale), await cache.first_use(live)]
        pruned = await cache.prune()
        remaining = await pool.fetch(
            "SELECT jti FROM task_token_uses WHERE jti = ANY($1::text[])", [live.jti, stale.jti]
        )
    finally:
        await pool.close()

    assert firsts == [True, True, False]
    assert pruned >= 1
    assert [row["jti"] for row in remaining] == [live.jti]


async def test_a_burst_of_uses_records_each_token_once_in_postgresql(dsn: str) -> None:
    now = int(time.time())
    tokens = [_claims(expires=now + 60) for _ in range(12)]
    uses = [claims for claims in tokens for _ in range(3)]  # every token presented three times at once
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        cache = ReplayCache(lambda: pool)
        firsts = await asyncio.gather(*(cache.first_use(claims) for claims in uses))
        stored = await pool.fetchval(
            "SELECT count(*) FROM task_token_uses WHERE jti = ANY($1::text[])",
            [claims.jti for claims in tokens],
        )
    finally:
        await pool.close()

    by_token = {
        claims.jti: [first for use, first in zip(uses, firsts, strict=True) if use is claims]
        for claims in tokens
    }
    assert all(answers.count(True) == 1 for answers in by_token.values()), by_token
    assert stored == len(tokens)


def _claims(*, expires: int) -> TaskClaims:
    return TaskClaims(
        iss="raydag",
        aud="http://replay.test/mcp",
        sub="s",
        tenant_id="tenant-demo",
        task_id="t",
        resource={"case_id": "C-102"},
        tool="caseops_get_case_snapshot",
        scope=SCOPE_CASES,
        iat=expires - 60,
        nbf=expires - 60,
        exp=expires,
        jti=uuid.uuid4().hex,
    )


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_a_call_outside_the_tokens_scope_is_403_before_the_tool_runs(
    tool_server: RunningToolServer, era: str
) -> None:
    token = tool_server.token("caseops_get_policy_requirements", scopes=frozenset({SCOPE_CASES}))
    before = tool_server.server.calls.get("caseops_get_policy_requirements", 0)

    response = rpc(
        tool_server.url,
        token,
        "tools/call",
        {"name": "caseops_get_policy_requirements", "arguments": {"case_id": "C-102"}},
        era=era,
    )

    assert response.status_code == 403
    assert response.headers["www-authenticate"].startswith(
        'Bearer error="insufficient_scope", scope="policies:read"'
    )
    assert response.json()["error"] == "insufficient_scope"
    assert tool_server.server.calls.get("caseops_get_policy_requirements", 0) == before


def test_a_foreign_host_is_421_and_a_foreign_origin_403(tool_server: RunningToolServer) -> None:
    token = tool_server.token("caseops_get_case_snapshot")
    rebinding = rpc(tool_server.url, token, "tools/list", headers={"Host": "attacker.example"})
    cross_site = rpc(tool_server.url, token, "tools/list", headers={"Origin": "http://attacker.example"})
    local_page = rpc(tool_server.url, token, "tools/list", headers={"Origin": "http://localhost:3000"})

    assert rebinding.status_code == 421
    assert cross_site.status_code == 403
    assert local_page.status_code == 200


def test_the_host_and_origin_allow_lists_are_configurable(dsn: str, token_key: bytes) -> None:
    with serving(
        dsn, token_key, allowed_hosts=("mcp.internal:*",), allowed_origins=("https://console.internal",)
    ) as server:
        token = server.token("caseops_get_case_snapshot")
        named = rpc(server.url, token, "tools/list", headers={"Host": "mcp.internal:8443"})
        loopback = rpc(server.url, token, "tools/list")
        console = rpc(
            server.url,
            token,
            "tools/list",
            headers={"Host": "mcp.internal:8443", "Origin": "https://console.internal"},
        )
        other_origin = rpc(
            server.url,
            token,
            "tools/list",
            headers={"Host": "mcp.internal:8443", "Origin": "http://localhost"},
        )

    assert named.status_code == 200
    assert loopback.status_code == 421
    assert console.status_code == 200
    assert other_origin.status_code == 403


def test_a_body_over_the_cap_is_413(dsn: str, token_key: bytes) -> None:
    with serving(dsn, token_key, max_body_bytes=2048) as server:
        token = server.token("caseops_get_case_snapshot")
        small = rpc(server.url, token, "tools/list")
        large = rpc(server.url, token, "tools/list", {"padding": "x" * 4096})

    assert small.status_code == 200
    assert large.status_code == 413
    assert large.json() == {"error": "body_too_large", "max_bytes": 2048}


def test_a_tenant_over_its_rate_is_429_with_retry_after_and_others_are_not(
    dsn: str, token_key: bytes
) -> None:
    with serving(dsn, token_key, tenant_limits=TenantLimits(rate_per_s=0.5, burst=2)) as server:
        demo = server.token("caseops_get_case_snapshot")
        statuses = [rpc(server.url, demo, "tools/list") for _ in range(3)]
        other = rpc(
            server.url, server.token("caseops_get_case_snapshot", tenant="tenant-other"), "tools/list"
        )

    assert [response.status_code for response in statuses] == [200, 200, 429]
    assert statuses[2].headers["retry-after"] == "2"
    assert statuses[2].json()["limit"] == "rate"
    assert other.status_code == 200


class _Held(BaseModel):
    case_id: str


HELD = ToolContract(
    name="held_read",
    version="1.0.0",
    description="Answers only once the test lets it: a request that holds its tenant's slot for as long as needed.",
    scope=SCOPE_CASES,
    risk=Risk.READ_ONLY,
    input_model=CaseInput,
    run_bound=frozenset({"case_id"}),
    output_model=_Held,
)


class Gate:
    """The handler of ``HELD``: says when a call has reached it, then waits until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    async def handler(self, claims: Any, args: Any) -> _Held:
        self.entered.set()
        await asyncio.to_thread(self.opened.wait, 60)
        return _Held(case_id=args.case_id)


async def test_a_tenant_over_its_concurrency_is_429(dsn: str, token_key: bytes) -> None:
    gate = Gate()
    limits = TenantLimits(max_in_flight=1)
    with serving(dsn, token_key, extra_tools=[(HELD, gate.handler)], tenant_limits=limits) as server:
        held_token = server.token(HELD.name, scopes=frozenset({SCOPE_CASES}))
        token = server.token("caseops_get_case_snapshot")
        call = {"name": HELD.name, "arguments": {"case_id": "C-102"}}
        held = asyncio.ensure_future(asyncio.to_thread(rpc, server.url, held_token, "tools/call", call))
        try:
            assert await asyncio.to_thread(gate.entered.wait, 30)  # the held call has the tenant's one slot
            refused = await asyncio.to_thread(call_snapshot, server, token)
        finally:
            gate.opened.set()
        answered = await held
        later = call_snapshot(server, token)  # the refused request did not use its token up

    assert answered.status_code == 200
    assert answered.json()["result"]["structuredContent"] == {"case_id": "C-102"}
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.json()["limit"] == "concurrency"
    assert later.status_code == 200


def test_logs_hold_no_token_and_no_argument(
    tool_server: RunningToolServer, caplog: pytest.LogCaptureFixture
) -> None:
    marker = "DOC-LOGMARK-7Q"
    resolve = {
        "name": "caseops_resolve_document_alias",
        "arguments": {"case_id": "C-102", "document_id": marker},
    }
    invalid = {"name": "caseops_get_case_snapshot", "arguments": {"case_id": "C-102", "secret": marker}}
    tokens = [
        tool_server.token(tool)
        for tool in ("caseops_resolve_document_alias", *["caseops_get_case_snapshot"] * 2)
    ]
    narrow = tool_server.token("caseops_resolve_document_alias", scopes=frozenset({SCOPE_CASES}))

    with caplog.at_level(logging.DEBUG):
        answers = [
            rpc(tool_server.url, tokens[0], "tools/call", resolve),
            rpc(tool_server.url, tokens[0], "tools/call", resolve),  # replayed
            rpc(tool_server.url, tokens[1], "tools/call", invalid, era=LEGACY),
            rpc(tool_server.url, narrow, "tools/call", resolve),  # insufficient scope
            rpc(tool_server.url, tokens[1] + "x", "tools/call", resolve),  # bad signature
            rpc(tool_server.url, tokens[2], "tools/call", {**invalid, "name": "no_such_tool"}),
        ]

    assert [answer.status_code for answer in answers] == [200, 401, 200, 403, 401, 400]
    assert any(record.name.startswith("mcp_server") for record in caplog.records)  # the guard did log
    logged = "\n".join(
        f"{record.getMessage()} {record.exc_text or ''} {record.args!r}" for record in caplog.records
    )
    for secret in (*tokens, narrow, marker, json.dumps(resolve["arguments"])):
        assert secret not in logged


def test_auth_can_be_switched_off_for_loopback_only() -> None:
    tokens = TaskTokens(key=b"k" * 32, audience="http://127.0.0.1/mcp")

    with pytest.raises(ValueError, match="loopback only"):
        ToolServerConfig(
            dsn="postgresql://unused",
            tokens=tokens,
            allowed_hosts=("127.0.0.1:*", "mcp.example.com:*"),
            insecure_disable_auth_for_tests=True,
        )
    assert ToolServerConfig(dsn="postgresql://unused", tokens=tokens, insecure_disable_auth_for_tests=True)


def test_without_auth_the_server_lists_but_runs_no_tool(dsn: str, token_key: bytes) -> None:
    with serving(dsn, token_key, insecure_disable_auth_for_tests=True) as server:
        listed = rpc(server.url, None, "tools/list")
        called = rpc(server.url, None, "tools/call", SNAPSHOT)
        read = rpc(server.url, None, "resources/read", {"uri": "case://C-102@7"})

    assert listed.status_code == 200
    assert called.json()["result"]["structuredContent"]["error"]["code"] == "UNAUTHENTICATED"
    assert read.json()["error"]["code"] == -32602

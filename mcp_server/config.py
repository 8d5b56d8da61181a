"""What the caseops tool server is configured with: its database, the task tokens it verifies, the hosts and
origins it answers, its per-tenant limits (a module of its own: the server and its tools both read it)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dag.tokens import TaskTokens
from mcp_server.guard import is_loopback
from mcp_server.limits import TenantLimits

LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*")


LOOPBACK_ORIGINS = tuple(f"http://{host}" for host in LOOPBACK_HOSTS)


@dataclass
class ToolServerConfig:
    dsn: str
    tokens: TaskTokens
    latency_ms: int = 0
    """Simulated upstream latency per call (benchmarks, tests); 0 in production."""
    pool_size: int = 4
    faults: dict[str, int] = field(default_factory=dict)
    """Fault injection for tests: the first N calls of each named tool answer UPSTREAM_UNAVAILABLE."""
    stall_after_commit: dict[str, int] = field(default_factory=dict)
    """Fault injection for tests: the first N calls of a named write commit their effect, then never answer."""
    allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS
    """``Host`` values accepted (``name:*`` for any port); anything else is 421 (DNS-rebinding protection)."""
    allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS
    """``Origin`` values accepted when a request has one; anything else is 403."""
    max_body_bytes: int = 64 * 1024
    """Larger request bodies are 413; MCP requests to these tools are well under 2 KiB."""
    tenant_limits: TenantLimits = field(default_factory=TenantLimits)
    """Per tenant and per server replica: requests in flight and the request rate (429 beyond)."""
    export_stage_ms: int = 750
    """The pause of each stage of an evidence export (``mcp_server.export``): a few seconds in all; tests
    shorten it."""
    replay_prune_interval_s: float = 30.0
    """How often expired rows leave the replay cache."""
    direct_calls: bool = True
    """Answer plain 2026-07-28 ``tools/call`` requests past the SDK's per-request plumbing
    (``mcp_server.stateless_call``); ``False`` sends every request through the SDK, which the benchmark and
    the differential test compare it with."""
    insecure_disable_auth_for_tests: bool = False
    """Serve without task tokens, for the conformance suite, which cannot send one. Tools and resources then
    refuse every call and read. Only with loopback ``allowed_hosts``, and only on a loopback socket."""

    def __post_init__(self) -> None:
        if self.insecure_disable_auth_for_tests:
            foreign = [host for host in self.allowed_hosts if not is_loopback(_hostname(host))]
            if foreign:
                raise ValueError(f"authentication may be switched off on loopback only, not for {foreign}")


def _hostname(host: str) -> str:
    """``127.0.0.1:*`` → ``127.0.0.1``; ``[::1]:8000`` → ``::1``."""
    if host.startswith("["):
        return host[1 : host.index("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host

"""Per-tenant admission: a token bucket for the request rate and a cap on requests in flight.

Pure and in-process: each server replica keeps its own counters, so a tenant's effective limits across N
replicas are N times these. That bounds what one replica serves, which is what protects it; a global limit
would need a shared counter on every request, which the replay cache already costs for tool calls only.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TenantLimits:
    """Each tenant may have ``max_in_flight`` requests at once and ``rate_per_s`` on average, with bursts of
    up to ``burst`` requests. The defaults sit above what one replica serves on a small machine (~500 calls/s
    on 2 cores) and above a run's ``max_parallel`` (16; 64 in the benchmarks), so they stop a runaway tenant,
    not a busy one."""

    max_in_flight: int = 128
    rate_per_s: float = 1000.0
    burst: int = 2000

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.rate_per_s <= 0 or self.burst < 1:
            raise ValueError("tenant limits must be positive")


@dataclass(frozen=True)
class Refused:
    """A request over a limit: which one, and when to try again (whole seconds, for ``Retry-After``)."""

    limit: str
    retry_after_s: int


@dataclass
class _Bucket:
    tokens: float
    updated: float


@dataclass
class Admission:
    """Decides whether a tenant's request may start now; ``leave`` must follow every admitted request."""

    limits: TenantLimits
    _buckets: dict[str, _Bucket] = field(default_factory=dict)
    _in_flight: Counter[str] = field(default_factory=Counter)

    def enter(self, tenant: str, now: float) -> Refused | None:
        """Admit the request (``None``) or say why not. A refused request takes nothing from the bucket."""
        if self._in_flight[tenant] >= self.limits.max_in_flight:
            return Refused("concurrency", 1)
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(float(self.limits.burst), now)
        bucket.tokens = min(
            float(self.limits.burst), bucket.tokens + (now - bucket.updated) * self.limits.rate_per_s
        )
        bucket.updated = now
        if bucket.tokens < 1:
            wait = (1 - bucket.tokens) / self.limits.rate_per_s
            return Refused("rate", max(1, math.ceil(wait)))
        bucket.tokens -= 1
        self._in_flight[tenant] += 1
        return None

    def leave(self, tenant: str) -> None:
        self._in_flight[tenant] -= 1
        if self._in_flight[tenant] <= 0:
            del self._in_flight[tenant]

    def in_flight(self, tenant: str) -> int:
        return self._in_flight[tenant]

"""A circuit breaker per tool: a tool that keeps failing is taken out of service for a cool-off period."""

from __future__ import annotations

from dataclasses import dataclass, field

from dag.events import ErrorKind

_BREAKING_KINDS = frozenset({ErrorKind.TRANSIENT, ErrorKind.PROTOCOL})


@dataclass
class ToolHealth:
    """Counts consecutive transient or protocol failures per tool; ``threshold`` of them open the circuit.

    After ``cooloff_s`` the tool is offered again (half-open): one success closes the circuit, one more
    failure opens it for another cool-off. Business and authorization errors say nothing about health.
    """

    threshold: int = 5
    cooloff_s: float = 30.0
    _failures: dict[str, int] = field(default_factory=dict)
    _open_until: dict[str, float] = field(default_factory=dict)

    def record(self, tool: str, error: ErrorKind | None, now: float) -> None:
        if error is None:
            self._failures.pop(tool, None)
            self._open_until.pop(tool, None)
            return
        if error not in _BREAKING_KINDS:
            return
        failures = self._failures.get(tool, 0) + 1
        self._failures[tool] = failures
        half_open = tool in self._open_until
        if failures >= self.threshold or half_open:
            self._open_until[tool] = now + self.cooloff_s

    def unhealthy(self, now: float) -> frozenset[str]:
        return frozenset(tool for tool, until in self._open_until.items() if now < until)

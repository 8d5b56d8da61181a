"""A circuit breaker per tool and tenant: a tool that keeps failing is rested, and calls to it wait.

An open circuit never fails a node: a call waits until the circuit lets one probe through, and the rest
wait for what the probe learns. Only the tool's own failures count (its server timed out, answered 5xx,
or broke the protocol); raydag's failures — a dead worker, a recovered supervisor — say nothing about the
tool, and neither do business answers or refusals.

The key is ``(tenant_id, tool)``. A tenant's faults (its data making a tool fail, its rate limit at the
server) rest the tool for that tenant alone; a tool server that is down for everyone opens every tenant's
circuit after that tenant's own few failures, which costs each tenant ``threshold`` failed attempts and
keeps any one tenant from denying calls to another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dag.events import ErrorKind, NodeError

HealthKey = tuple[str, str]
"""``(tenant_id, tool)``."""

_BREAKING_KINDS = frozenset({ErrorKind.TRANSIENT, ErrorKind.PROTOCOL})


def counts_against_tool(error: NodeError) -> bool:
    """Whether a failure is evidence that the tool (or its server) is unwell."""
    return error.kind in _BREAKING_KINDS and not error.runtime_failure


@dataclass(frozen=True)
class Go:
    """Call now."""

    probe: bool = False
    """This call is the one probe of a half-open circuit: its outcome must be recorded or released."""


@dataclass(frozen=True)
class WaitFor:
    """The circuit is open (or its probe is out): ask again in ``seconds``."""

    seconds: float


Admission = Go | WaitFor


@dataclass
class _Circuit:
    failures: int = 0
    open_until: float | None = None
    cooloff_s: float = 0.0
    probe_since: float | None = None


@dataclass
class ToolHealth:
    """Counts consecutive tool failures per key; ``threshold`` of them open the circuit.

    An open circuit rests for a cool-off that starts at ``first_cooloff_s`` and doubles each time a probe
    fails, up to ``max_cooloff_s``, so a short outage costs a short wait and a long one costs few probes.
    After the cool-off one call is let through (half-open); a success closes the circuit, a failure opens it
    again. A probe that never reports (its run ended first) is released, or expires after
    ``probe_timeout_s``.
    """

    threshold: int = 5
    first_cooloff_s: float = 1.0
    max_cooloff_s: float = 30.0
    probe_timeout_s: float = 60.0
    recheck_s: float = 0.25
    """How soon a call waiting behind another call's probe asks again."""
    _circuits: dict[HealthKey, _Circuit] = field(default_factory=dict)

    def admit(self, key: HealthKey, now: float) -> Admission:
        """May a call to ``key`` go now? Marks the caller as the probe of a half-open circuit."""
        circuit = self._circuits.get(key)
        if circuit is None or circuit.open_until is None:
            return Go()
        if now < circuit.open_until:
            return WaitFor(circuit.open_until - now)
        if circuit.probe_since is not None and now - circuit.probe_since < self.probe_timeout_s:
            return WaitFor(self.recheck_s)
        circuit.probe_since = now
        return Go(probe=True)

    def record(self, key: HealthKey, error: NodeError | None, now: float) -> None:
        """A call to ``key`` ended: ``None`` for a success, else its error."""
        if error is None:
            self._circuits.pop(key, None)
            return
        circuit = self._circuits.get(key)
        if not counts_against_tool(error):
            if circuit is not None:
                circuit.probe_since = None  # the probe learned nothing: let another call probe
            return
        if circuit is None:
            circuit = self._circuits[key] = _Circuit()
        circuit.failures += 1
        if circuit.open_until is not None:
            if now < circuit.open_until:
                return  # a call that went out before the circuit opened: it tells nothing new
            circuit.cooloff_s = min(self.max_cooloff_s, circuit.cooloff_s * 2)  # the probe failed
        elif circuit.failures >= self.threshold:
            circuit.cooloff_s = self.first_cooloff_s
        else:
            return
        circuit.open_until = now + circuit.cooloff_s
        circuit.probe_since = None

    def release(self, key: HealthKey) -> None:
        """A probe that will never report (its call was cancelled): another call may probe."""
        circuit = self._circuits.get(key)
        if circuit is not None:
            circuit.probe_since = None

    def is_open(self, key: HealthKey) -> bool:
        """Whether the circuit is open or half-open: failures now are the tool's outage, not a node's."""
        circuit = self._circuits.get(key)
        return circuit is not None and circuit.open_until is not None

    def resting(self, now: float) -> frozenset[HealthKey]:
        """The keys whose circuits are open and still cooling off."""
        return frozenset(
            key
            for key, circuit in self._circuits.items()
            if circuit.open_until is not None and now < circuit.open_until
        )

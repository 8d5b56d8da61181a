"""The deployment's supervisors as one API replica sees them: new runs go to each in turn, a run's own requests
to the supervisor that owns it.

Any supervisor may answer what is not about one run (the tools offered, a readiness ping); a run's
cancellation must reach its owner, named by the run's row (its lease). Each supervisor has a line of its own
for submissions (``submissions``): a busy or restarting one does not hold up new runs bound for another, and
one whose last submission found it dead or silent is passed over while another answers (``next_in_turn``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from actors.api._outcomes import submissions
from actors.store.resilience import Line


class Supervisors:
    """Handles of the deployment's supervisors, by name, in their order."""

    def __init__(self, handles: Mapping[str, Any]) -> None:
        if not handles:
            raise ValueError("a deployment needs at least one supervisor")
        self._handles = dict(handles)
        self._lines = {name: submissions() for name in self._handles}
        self._turn = 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._handles)

    @property
    def any(self) -> Any:
        """A supervisor for what any of them answers alike (the tools offered)."""
        return next(iter(self._handles.values()))

    def all(self) -> list[tuple[str, Any]]:
        return list(self._handles.items())

    def next(self) -> tuple[Any, Line]:
        """The supervisor a new run goes to, and its line: each in turn, past those in an outage."""
        names = self.names
        outages = {name: self._lines[name].outage_seen_at for name in names}
        index = next_in_turn(names, self._turn, outages, now=time.monotonic())
        self._turn = index + 1
        name = names[index]
        line = self._lines[name]
        line.probe()  # if it is in an outage, this run alone tries it again
        return self._handles[name], line

    def owning(self, owner: str | None) -> Any:
        """The supervisor named ``owner`` (a run's lease holder); another of this deployment's if it is none
        of them (the run is being taken over, or has ended: any supervisor says so)."""
        return self._handles.get(owner or "", self.any)


PROBE_AFTER_S = 5.0
"""How long a supervisor whose submission found it dead or silent is passed over before a new run tries it
again (Ray restarts a supervisor in seconds; a lost node's are noticed in 15-20 s)."""


def next_in_turn(names: Sequence[str], turn: int, outages: Mapping[str, float | None], *, now: float) -> int:
    """The index in ``names`` of the supervisor a new run goes to: the one whose ``turn`` it is, or the next
    after it not in an outage. ``outages`` holds when each one's line last found it unreachable (``None``: it
    answers). One found unreachable ``PROBE_AFTER_S`` ago or more is tried again, so that its recovery is
    noticed; if every one is in an outage, the turn stands (the run gets a 503, and its client retries)."""
    count = len(names)
    for step in range(count):
        index = (turn + step) % count
        seen_at = outages.get(names[index])
        if seen_at is None or now - seen_at >= PROBE_AFTER_S:
            return index
    return turn % count

"""The deployment's supervisors as one API replica sees them: new runs go to each in turn, a run's own requests
to the supervisor that owns it.

Any supervisor may answer what is not about one run (the tools offered, a readiness ping); a run's
cancellation must reach its owner, named by the run's row (its lease). Each supervisor has a line of its own
for submissions (``submissions``): a busy or restarting one does not hold up new runs bound for another.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
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
        self._turns = itertools.cycle(list(self._handles))

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
        """The supervisor a new run goes to, and its line: each in turn."""
        name = next(self._turns)
        return self._handles[name], self._lines[name]

    def owning(self, owner: str | None) -> Any:
        """The supervisor named ``owner`` (a run's lease holder); another of this deployment's if it is none
        of them (the run is being taken over, or has ended: any supervisor says so)."""
        return self._handles.get(owner or "", self.any)

"""The deployment's supervisors as one API replica sees them: new runs go to each in turn, a run's own requests
to the supervisor that owns it.

Any supervisor may answer what is not about one run (the tools offered, a readiness ping): the first that
answers does, past those found dead or silent, so that no read depends on one supervisor. A run's
cancellation goes to its owner, named by the run's row (its lease), and to another if the owner is gone.
Each supervisor has a line of its own for submissions (``submissions``): a busy or restarting one does not
hold up new runs bound for another, and one whose last submission found it dead or silent is passed over
while another answers (``next_in_turn``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from actors.api._outcomes import ask, submissions
from actors.api._problem import Problem
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

    def answering(self, first: str | None = None) -> list[tuple[Any, Line]]:
        """The supervisors to ask, in order: the one named ``first`` (a run's owner) if it is one of them, then
        those not found dead or silent, then the others, so that one gone for good costs a request nothing
        once it has been noticed. A caller reports each answer to its line (``Line.answered`` /
        ``Line.unreachable``)."""
        now = time.monotonic()
        names = sorted(
            self.names,
            key=lambda name: (name != first, _in_outage(self._lines[name].outage_seen_at, now)),
        )
        return [(self._handles[name], self._lines[name]) for name in names]

    async def ask_any(self, call: Callable[[Any], Awaitable[Any]], *, first: str | None = None) -> Any:
        """The first answer to ``call(handle)`` (a ``handle.method.remote(...)``) from a supervisor, in the
        order ``answering(first)`` gives, within the request's deadline; 503 ``supervisor-unavailable`` if
        none answers. For what any of them answers alike (the tools offered), or what a run's owner answers
        best and any other answers truly (a cancellation: another says the run is not its own, or finished)."""
        unavailable: Problem | None = None
        for handle, line in self.answering(first):
            try:
                answer = await ask(functools.partial(call, handle))
            except Problem as problem:
                line.unreachable()
                unavailable = problem
                continue
            line.answered()
            return answer
        assert unavailable is not None  # a deployment has at least one supervisor
        raise unavailable


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
        if not _in_outage(outages.get(names[index]), now):
            return index
    return turn % count


def _in_outage(seen_at: float | None, now: float) -> bool:
    """Whether a supervisor found unreachable at ``seen_at`` is still passed over (``PROBE_AFTER_S``)."""
    return seen_at is not None and now - seen_at < PROBE_AFTER_S

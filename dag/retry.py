"""When a failed tool call is tried again: only transient failures of idempotent tools, with backoff."""

from __future__ import annotations

import random
from dataclasses import dataclass

from dag.contracts import ToolContract
from dag.events import ErrorKind, NodeError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter: attempt n waits a random time in [0, min(cap, base * 2**(n-1))].

    A hand-written formula rather than a retry library: the retry is not a loop around a call here but a
    recorded transition (``node_retry_scheduled``) that the supervisor performs later, so only the delay
    computation is needed, and it must be a pure, testable function.
    """

    base_s: float = 0.1
    cap_s: float = 2.0
    runtime_attempts: int = 40
    """How often a node is tried again after failures of raydag's own machinery (a dead worker, a recovered
    supervisor, a caller whose node was lost). They do not use up the tool's attempts, but a call that kills
    its worker every time must still end. Forty, most of them ``cap_s`` apart (~40 s), outlast what a lost
    Ray node takes: the cluster's notice of it (~15–20 s of missed health checks) and its callers' restart
    on another node; a run's deadline still bounds them."""

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))

    def refollow_delay(self, deaths: int, rng: random.Random) -> float | None:
        """Seconds to wait before following a task again after the process following it died (``deaths``:
        such deaths so far, this one included), or ``None`` once they used up ``runtime_attempts``.

        The task did not die with its follower: it is followed again, never called again. The wait is a dead
        worker's: a follower's caller takes seconds to restart (longer on a loaded machine), and following
        it again at once only meets it still restarting (Ray answers ``ActorUnavailableError``)."""
        if deaths >= self.runtime_attempts:
            return None
        return self.delay(deaths, rng)

    def next_delay(
        self,
        contract: ToolContract,
        error: NodeError,
        *,
        attempt: int,
        remaining_s: float,
        rng: random.Random,
        runtime_failures: int = 0,
    ) -> float | None:
        """Seconds to wait before trying again, or ``None`` when the failure is final.

        ``attempt`` counts the attempts the tool's own failures used up (this one included);
        ``runtime_failures`` the failures of raydag's machinery (this one included, if it is one).
        """
        if error.kind is not ErrorKind.TRANSIENT or not contract.idempotent:
            return None
        if error.runtime_failure:
            if runtime_failures >= self.runtime_attempts:
                return None
            wait = self.delay(runtime_failures, rng)
        elif attempt >= contract.max_attempts:
            return None
        else:
            wait = self.delay(attempt, rng)
        if wait + contract.timeout_s > remaining_s:
            return None  # the retry could not finish before the run's deadline
        return wait

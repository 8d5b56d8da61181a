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

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0, min(self.cap_s, self.base_s * 2 ** (attempt - 1)))

    def next_delay(
        self,
        contract: ToolContract,
        error: NodeError,
        *,
        attempt: int,
        remaining_s: float,
        rng: random.Random,
    ) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or ``None`` when the failure is final."""
        if (
            error.kind is not ErrorKind.TRANSIENT
            or not contract.idempotent
            or attempt >= contract.max_attempts
        ):
            return None
        wait = self.delay(attempt, rng)
        if wait + contract.timeout_s > remaining_s:
            return None  # the retry could not finish before the run's deadline
        return wait

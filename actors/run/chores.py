"""What a supervisor does on a clock beside driving runs (``Chores``): adopt orphaned runs and renew its leases
(``Ownership``), relay the outbox, settle the writes no run drives any more, and listen for people's decisions.
Each job outlives a failure of its own (a database outage): it is tried again a period later."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from actors.run.deps import RunDeps
from actors.run.intake import call_as
from actors.run.operate import sweep
from actors.run.ownership import Ownership
from actors.store.decisions import DecisionWakeups
from actors.store.operations import Operation, OperationStore
from actors.store.outbox import OutboxRelay
from dag.contracts import ToolContract
from dag.policy import Principal

if TYPE_CHECKING:
    from actors.calls.call import ToolOutcome

log = logging.getLogger(__name__)

SWEEP_S = 10.0
"""How often a supervisor settles the writes of ended runs and reports the unknown ones."""
RELAY_S = 1.0
"""How often the outbox is relayed."""


class Chores:
    """The background jobs of one supervisor: started once, stopped when it drains or closes."""

    def __init__(
        self,
        deps: RunDeps,
        *,
        ownership: Ownership,
        relay: OutboxRelay,
        operations: OperationStore,
        decisions: DecisionWakeups,
        lease_s: float,
    ) -> None:
        """Leases are renewed, and orphans looked for, every third of ``lease_s``."""
        self._deps = deps
        self._ownership = ownership
        self._relay = relay
        self._operations = operations
        self._decisions = decisions
        self._lease_s = lease_s
        self._jobs: list[asyncio.Task[None]] = []

    def start(self) -> None:
        period = self._lease_s / 3
        self._jobs = [
            asyncio.create_task(_every(period, self._ownership.adopt_orphans), name="adopt-orphans"),
            asyncio.create_task(_every(period, self._ownership.renew_leases), name="renew-leases"),
            asyncio.create_task(_every(RELAY_S, self._relay.relay_once), name="relay-outbox"),
            asyncio.create_task(_every(SWEEP_S, self.sweep_operations), name="sweep-operations"),
            asyncio.create_task(self._decisions.keep_listening(), name="listen-for-decisions"),
        ]

    def cancel(self) -> list[asyncio.Task[None]]:
        """Cancel every job; the jobs, to await."""
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            job.cancel()
        return jobs

    async def sweep_operations(self) -> None:
        """Settle the writes of runs that ended with them out or unknown (``operate.sweep``), and report how
        many are unknown and since when."""
        deps = self._deps

        async def read(row: Operation, contract: ToolContract, args: dict[str, Any]) -> ToolOutcome:
            principal = Principal(row.tenant_id, row.subject, frozenset({contract.scope}))
            return await call_as(deps, principal, row.resource, contract, args)

        await sweep(
            self._operations,
            deps.catalogue,
            read,
            actor=f"supervisor:{self._ownership.owner}",
            call_limit_s=deps.call_limit_s,
        )
        deps.metrics.unknown_operations(*await self._operations.unknown())


async def _every(period_s: float, job: Callable[[], Awaitable[Any]]) -> None:
    while True:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:  # a background job must outlive a database outage
            log.warning("background job %s failed; retrying in %gs", job.__name__, period_s, exc_info=True)
        await asyncio.sleep(period_s)

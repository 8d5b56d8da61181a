"""Run ownership through leases in PostgreSQL: claimed at creation, renewed while live, taken over when they lapse."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from dataclasses import dataclass

import asyncpg

from actors.store.resilience import RUN_WINDOW_S, retrying
from dag.errors import RaydagError


class LeaseLost(RaydagError):
    """Another supervisor owns the run now; this one must stop driving it (and record nothing more)."""


@dataclass(frozen=True)
class Claim:
    run_id: str
    previous_owner: str | None


class Leases:
    """Each live run has one owner; an owner keeps its runs by renewing their leases.

    A supervisor's owner name is its actor name, which Ray keeps unique: a supervisor restarted under the
    same name may reclaim its runs at once, while anyone else waits for their lease to lapse.
    """

    def __init__(self, pool: asyncpg.Pool, owner: str, lease_s: float) -> None:
        self._pool = pool
        self.owner = owner
        self.lease_s = lease_s

    async def renew(self, run_ids: Collection[str]) -> set[str]:
        """Extend the leases of ``run_ids``; return those this owner no longer holds.

        A run that finished since its driver was listed is still held (its lease is not extended): its driver
        is only just leaving, and must not be told that it was taken over.
        """
        if not run_ids:
            return set()
        keys = [uuid.UUID(run_id) for run_id in run_ids]

        async def update() -> set[str]:
            rows = await self._pool.fetch(
                """UPDATE runs SET lease_expires_at = CASE WHEN finished_at IS NULL
                       THEN now() + make_interval(secs => $3) ELSE lease_expires_at END
                   WHERE run_id = ANY($1::uuid[]) AND owner = $2
                   RETURNING run_id""",
                keys,
                self.owner,
                self.lease_s,
            )
            return {str(key) for key in keys} - {str(row["run_id"]) for row in rows}

        return await retrying(update, window_s=RUN_WINDOW_S, what="lease renewal")

    async def claim_orphans(
        self,
        *,
        driving: Collection[str],
        serving: Collection[str] | None = None,
        planning: Collection[str] | None = None,
        limit: int = 50,
    ) -> list[Claim]:
        """Take over live runs nobody drives: this owner's own (after a restart), any whose lease lapsed, and
        parked ones that are due (a decision was written, or a wait's deadline came), among those whose tools
        are all in ``serving`` and whose planner is in ``planning`` (``None``: whatever they are). A parked run
        not due is nobody's and costs nothing: it is left alone."""
        rows = await self._pool.fetch(
            """WITH orphan AS (
                   SELECT run_id, owner FROM runs
                   WHERE finished_at IS NULL
                     AND NOT (run_id = ANY($3::uuid[]))
                     AND (owner = $1 OR owner IS NULL OR lease_expires_at < now())
                     AND (parked_until IS NULL OR parked_until <= now())
                     AND ($5::text[] IS NULL OR tools IS NULL OR tools <@ $5::text[])
                     AND ($6::text[] IS NULL OR planner = ANY($6::text[]))
                   ORDER BY created_at
                   LIMIT $4
                   FOR UPDATE SKIP LOCKED
               )
               UPDATE runs SET owner = $1, lease_expires_at = now() + make_interval(secs => $2),
                               parked_until = NULL
               FROM orphan WHERE runs.run_id = orphan.run_id
               RETURNING runs.run_id, orphan.owner AS previous_owner""",
            self.owner,
            self.lease_s,
            [uuid.UUID(run_id) for run_id in driving],
            limit,
            sorted(serving) if serving is not None else None,
            sorted(planning) if planning is not None else None,
        )
        return [Claim(str(row["run_id"]), row["previous_owner"]) for row in rows]

    async def claim_parked(
        self,
        run_id: str,
        *,
        serving: Collection[str] | None = None,
        planning: Collection[str] | None = None,
    ) -> bool:
        """Take a parked run to wake it (a decision about it was written, or it is to be cancelled), if its
        tools are all in ``serving`` and its planner is in ``planning`` (``None``: whatever they are);
        ``False`` if it is not parked (any more: it is live and driven, or finished) or not this supervisor's
        to drive."""

        async def update() -> bool:
            claimed = await self._pool.fetchval(
                """UPDATE runs SET owner = $1, lease_expires_at = now() + make_interval(secs => $2),
                                   parked_until = NULL
                   WHERE run_id = $3 AND parked_until IS NOT NULL AND finished_at IS NULL
                     AND ($4::text[] IS NULL OR tools IS NULL OR tools <@ $4::text[])
                     AND ($5::text[] IS NULL OR planner = ANY($5::text[]))
                   RETURNING run_id""",
                self.owner,
                self.lease_s,
                uuid.UUID(run_id),
                sorted(serving) if serving is not None else None,
                sorted(planning) if planning is not None else None,
            )
            return claimed is not None

        return await retrying(update, window_s=RUN_WINDOW_S, what="parked run claim")

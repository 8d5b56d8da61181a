"""Which runs this process drives (``Ownership``): runs nobody drives taken over (a crashed or restarted
supervisor's), this owner's leases kept, runs parked on people woken here when a decision about them is written
(or a child run they wait on ends), and a run given up the moment its lease is found to be another's."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

from actors.run.context import Interruption
from actors.run.driver import RunDriver
from actors.run.turns import Turns
from actors.store.decisions import DecisionWakeups
from actors.store.operations import OperationStore
from actors.store.ownership import Leases
from actors.store.questions import QuestionStore
from actors.store.resilience import DatabaseUnavailable
from actors.store.reviews import ReviewStore
from actors.store.runs import RunStore
from dag.operations import OperationState
from dag.questions import QuestionState
from dag.review import ReviewState
from dag.run_state import fold
from dag.states import RunStatus

log = logging.getLogger(__name__)

_OPERATION_WAITS = frozenset({OperationState.AWAITING_APPROVAL, OperationState.UNKNOWN})
"""The states in which an operation waits for a person (an approval; a resolution)."""


class Ownership:
    """The runs this process owns (``turns``), and how it comes to own them besides creating them: adopting
    orphans, waking parked runs; and how it stops owning one it lost."""

    def __init__(
        self,
        driver: RunDriver,
        *,
        owner: str,
        store: RunStore,
        leases: Leases,
        operations: OperationStore,
        reviews: ReviewStore,
        questions: QuestionStore,
        decisions: DecisionWakeups,
        serving: Callable[[], Collection[str]],
        planning: Collection[str],
        listed: asyncio.Event | None,
        max_active_runs: int,
    ) -> None:
        """``serving``: the tools this supervisor serves now, and ``planning`` the planners it offers: a run is
        taken over only where both cover it. ``listed`` is set once every toolset server has been tried: runs
        are adopted only then (``None``: at once)."""
        self.owner = owner
        self._driver = driver
        self._store = store
        self._leases = leases
        self._operations = operations
        self._reviews = reviews
        self._questions = questions
        self._serving = serving
        self._planning = planning
        self._listed = listed
        self.turns = Turns(driver, max_active_runs=max_active_runs, parked=self._parked)
        decisions.unwatched = self._woken_by_decision
        self._waking: set[asyncio.Task[bool]] = set()
        """Wake-ups of parked runs under way (kept referenced until they end)."""

    async def adopt_orphans(self) -> list[str]:
        """Take over live runs nobody drives (a crashed or restarted supervisor's) and resume them."""
        if self._driver.handover.is_set():
            return []  # stopping: adopting now would only hand the runs over again
        if self._listed is not None and not self._listed.is_set():
            return []  # a run resumed before its servers were tried would find their tools withdrawn
        claims = await self._leases.claim_orphans(
            driving=self.turns.owned(), serving=self._serving(), planning=self._planning
        )
        adopted = []
        for claim in claims:
            stored = await self._store.events(claim.run_id)
            if self.turns.owns(claim.run_id):
                continue  # created here while the scan ran: ours already, and already driven
            state = fold(item.event for item in stored)
            log.info("recovering run %s from %s", claim.run_id, claim.previous_owner)
            self.turns.start(state, last_seq=stored[-1].seq, recovered=(self.owner, claim.previous_owner))
            adopted.append(claim.run_id)
        return adopted

    async def renew_leases(self) -> None:
        """Keep this owner's runs its own; stop driving any whose lease another owner holds now."""
        for run_id in await self._leases.renew(list(self.turns.runs)):
            log.warning("run %s is no longer ours; stopping its driver here", run_id)
            task = self.turns.runs.get(run_id)
            if task is not None:
                task.cancel()

    async def wake(self, run_id: str, *, cancel: bool = False, because: Interruption | None = None) -> bool:
        """Claim a parked run and drive it again here (``cancel``: to record its cancellation, for ``because``
        if its parent stopped); ``False`` if it is not parked (any more), or this supervisor is stopping."""
        if self._driver.handover.is_set() or self.turns.owns(run_id):
            return False
        with self.turns.claiming(run_id):  # claimed and not driven yet: no orphan of this owner's scan
            try:
                claimed = await self._leases.claim_parked(
                    run_id, serving=self._serving(), planning=self._planning
                )
            except DatabaseUnavailable:
                log.warning("could not wake run %s now; the orphan scan will", run_id)
                return False
            if not claimed:
                return False
            stored = await self._store.events(run_id)
            self.turns.start(
                fold(item.event for item in stored), last_seq=stored[-1].seq, recovered=(self.owner, None)
            )
        if cancel:
            self.turns.cancel(run_id, because)
        return True

    def _parked(self, run_id: str, waits: tuple[str, ...]) -> None:
        """``run_id`` stopped being driven here to wait for people: wake it if one of ``waits`` was decided
        already."""
        self._soon(self._wake_if_decided(run_id, waits))

    def _woken_by_decision(self, run_id: str) -> None:
        """A decision about ``run_id`` was written, and no run of this process waits on it: if the run is
        parked, wake it here (the first supervisor to claim it does)."""
        if not self.turns.owns(run_id):
            self._soon(self.wake(run_id))

    def _soon(self, work: Awaitable[bool]) -> None:
        task = asyncio.ensure_future(work)
        self._waking.add(task)
        task.add_done_callback(self._waking.discard)

    async def _wake_if_decided(self, run_id: str, waits: Sequence[str]) -> bool:
        """Wake a run just parked if one of ``waits`` was decided (or a child run it waits on ended) before its
        parking was stored (the trigger that marks a parked run due could not see it yet)."""
        for wait in waits:
            kind, _, key = wait.partition(":")
            match kind:
                case "operation":
                    operation = await self._operations.get(key)
                    decided = operation is not None and operation.state not in _OPERATION_WAITS
                case "review":
                    review = await self._reviews.current(run_id, int(key))
                    decided = review is not None and review.state is not ReviewState.AWAITING
                case "question":
                    question = await self._questions.get(run_id, int(key))
                    decided = question is not None and question.state is not QuestionState.AWAITING
                case "child":  # a child run's end wakes its parent as a decision does
                    status = await self._store.run_status(key)
                    decided = status is None or RunStatus(status).terminal
                case _:
                    raise AssertionError(f"a run parked on {wait!r}")
            if decided:
                return await self.wake(run_id)
        return False

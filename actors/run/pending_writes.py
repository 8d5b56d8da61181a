"""The writes of one round that have not ended (``PendingWrites``): which wait and on what, which were taken up
again and have not said yet, and why a write's wait stopped the round. The run's status follows them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence, Set
from typing import Any

from actors.calls.call import ToolOutcome
from actors.run.context import Interruption, Parked
from actors.run.operate import (
    AWAITING_APPROVAL,
    OPERATION_EXPIRED,
    RESOLUTION_EXPIRED,
    CallTool,
    FollowTask,
    Operate,
    Wait,
)
from actors.run.recorder import RunRecorder, now
from dag.contracts import ToolContract
from dag.dispatch import Call
from dag.events import NodeError, RunParked, RunResumed, RunWaiting
from dag.run_state import RunState
from dag.states import RunStatus, StopReason


def waits_for_people_alone(out: Set[str], *, on_people: Set[str], parked_children: Set[str]) -> bool:
    """Whether a round whose nodes ``out`` are in flight waits for people and for nothing else: each is a write
    waiting for a person (``on_people``) or an agent node whose child run is parked (``parked_children``). An
    agent node whose child runs (or is followed elsewhere) is work in flight, as a read is."""
    return out <= on_people | parked_children


class PendingWrites:
    """A round's write nodes as their operations report them (``Operate.drive``'s ``waiting``): the round asks
    them whether it may park, what to expire when it stops, and whether a write's wait stopped it."""

    def __init__(
        self, run: RunRecorder, operate: Operate | None, let_go: asyncio.Event | None = None
    ) -> None:
        """``operate`` drives a write node through its operation's row (``None``: no ledger, so no write is
        called); ``let_go`` is set when the round lets the run go on elsewhere (a handover, a lost lease)."""
        self._run = run
        self._operate = operate
        self._let_go = let_go
        self._waiting: dict[str, Wait] = {}
        """Operations of this round waiting, and on what (``actors.run.operate``)."""
        self._waiting_nodes: dict[str, str] = {}
        """The node of each operation waiting."""
        self._unreported: set[str] = set()
        """Write nodes taken up again (a resumed or woken run) whose operation has not said yet whether it
        still waits: the run's status and parking wait for their word."""
        self._parking = False
        """The round is letting its waits go to park the run: their operations' last words are not news."""
        self.attention = asyncio.Event()
        """Set when an operation starts or stops waiting: the run's status follows."""
        self._driven = False
        """Whether this round has driven a write: only then can it have operations to expire when it stops."""
        self.expired: Interruption | None = None
        """Why the round stops: a write's wait for a person ran past its deadline (approval, resolution)."""

    def operated(self, contract: ToolContract) -> bool:
        """Whether a node of ``contract`` is driven through its operation: a write, with a ledger to drive it."""
        return contract.operation is not None and self._operate is not None

    def drive(
        self,
        state: RunState,
        step: Call,
        contract: ToolContract,
        *,
        call_limit_s: float,
        call: CallTool,
        follow: FollowTask,
    ) -> Coroutine[Any, Any, ToolOutcome]:
        """The operation of ``step``'s write node, to be driven to an outcome (approval, one execution,
        reconciliation; ``follow`` follows the MCP task its call may run as); from now on the round has writes
        to expire when it stops."""
        assert self._operate is not None, "only a write with a ledger to drive it is operated"
        self._driven = True
        node_id = step.node_id
        return self._operate.drive(
            state,
            node_id,
            contract,
            step.args,
            step.decision,
            call_limit_s=call_limit_s,
            call=call,
            waiting=lambda operation_id, wait: self._waits(node_id, operation_id, wait),
            follow=follow,
            let_go=self._let_go,
        )

    def take_up(self, node_id: str) -> None:
        """``node_id``'s write is taken up again (a resumed or woken run): the run waits for its word."""
        self._unreported.add(node_id)

    def unreported(self, node_id: str) -> bool:
        """Whether ``node_id`` was taken up again and its operation has not said yet whether it waits."""
        return node_id in self._unreported

    def waiting_nodes(self) -> set[str]:
        """The nodes whose operation waits (for a person, or for the world too)."""
        return set(self._waiting_nodes.values())

    def parkable(self, calls: set[str], parked_children: Set[str] = frozenset()) -> bool:
        """Whether every node of ``calls`` (those out) is a write waiting for a person alone or an agent node of
        ``parked_children`` (its child run parked), and every write taken up again has said so."""
        if self._unreported:
            return False
        on_people = {self._waiting_nodes[op] for op, wait in self._waiting.items() if wait.person}
        return waits_for_people_alone(calls, on_people=on_people, parked_children=parked_children)

    def ended(self, node_id: str, error: NodeError) -> None:
        """``node_id``'s write failed with ``error``: it has said its word, and its wait may stop the round."""
        self._unreported.discard(node_id)
        if error.code == OPERATION_EXPIRED:
            self.expired = Interruption(StopReason.APPROVAL_EXPIRED, f"{node_id}: {error.message}")
        elif error.code == RESOLUTION_EXPIRED:
            self.expired = Interruption(StopReason.RESOLUTION_EXPIRED, f"{node_id}: {error.message}")

    def _waits(self, node_id: str, operation_id: str, wait: Wait | None) -> None:
        """``node_id``'s operation starts (``wait``) or stops (``None``) waiting."""
        if self._parking:
            return
        reported = node_id in self._unreported
        self._unreported.discard(node_id)
        if wait is None:
            self._waiting_nodes.pop(operation_id, None)
            if self._waiting.pop(operation_id, None) is None and not reported:
                return
        elif self._waiting.get(operation_id) == wait:
            return
        else:
            self._waiting[operation_id] = wait
            self._waiting_nodes[operation_id] = node_id
        self.attention.set()

    async def follow(self) -> None:
        """The run's status follows its operations: ``waiting`` while one waits for a person."""
        self.attention.clear()
        state = self._run.state
        status = state.status
        unannounced = self._waiting.keys() - set(state.waiting_on)
        if self._waiting and (status is RunStatus.RUNNING or unannounced):  # a wait starts: said once
            reasons = sorted({wait.why for wait in self._waiting.values()})
            await self._run.record(
                RunWaiting(at=now(), operation_ids=tuple(sorted(self._waiting)), reason="; ".join(reasons))
            )
        elif not self._waiting and not self._unreported and status is RunStatus.WAITING:
            await self._run.record(RunResumed(at=now()))

    def let_go(self) -> None:
        """The round is about to cancel its waits to park the run: what their operations say now is not news."""
        self._parking = True

    async def park(self, children: Sequence[str] = ()) -> None:
        """Park the run on its waits (``RunParked``), once they were let go, and on the parked ``children``
        (child run ids) its agent nodes wait on: it holds nothing while people decide, and is woken by a
        decision, its first wait's deadline, or a child's end (a child's own waits have deadlines that end it).
        Raises ``Parked``."""
        await self.follow()
        if self._run.state.status is RunStatus.RUNNING:  # only its children wait for people: said here
            await self._run.record(
                RunWaiting(
                    at=now(),
                    operation_ids=(),
                    reason=f"its child runs wait for people: {', '.join(children)}",
                )
            )
        wake_at = min((wait.until for wait in self._waiting.values() if wait.until is not None), default=None)
        parked = (
            *(f"operation:{op}" for op in sorted(self._waiting)),
            *(f"child:{child_run_id}" for child_run_id in children),
        )
        await self._run.record(RunParked(at=now(), waits=parked, wake_at=wake_at))
        raise Parked(self._run.state.run_id, parked)

    async def expire(self, interruption: Interruption | None) -> Interruption | None:
        """The round stops (its deadline, a cancellation): its operations not yet executing — awaiting a person,
        or approved and not yet claimed — expire, so that nothing executes a write of a run that is over. A
        deadline that caught one awaiting approval is reported as the approval's."""
        operate = self._operate
        if operate is None or not self._driven:
            return interruption
        note = "the run stopped before the write executed" if interruption is None else interruption.detail
        run_id = self._run.state.run_id
        waited = {op for op, wait in self._waiting.items() if wait.why == AWAITING_APPROVAL}
        await operate.expire_unexecuted(run_id, note=note)
        if interruption is None or interruption.reason is not StopReason.DEADLINE_EXCEEDED:
            return interruption
        # Expired here, or by its own waiter at its deadline (the run's) a moment before: it waited past it.
        awaiting = sorted(waited & await operate.expired_of(run_id))
        if awaiting:
            return Interruption(
                StopReason.APPROVAL_EXPIRED,
                f"{len(awaiting)} operation(s) waited for approval past the run's deadline: {', '.join(awaiting)}",
            )
        if self.expired is not None:  # its node landed before the round saw the deadline
            return self.expired
        return interruption

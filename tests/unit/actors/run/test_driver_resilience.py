"""RunDriver under failure and pressure: retries, the circuit breaker, max_parallel, the deadline, cancellation."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
import uuid
from datetime import timedelta
from typing import Any, Literal

import pytest

from actors.calls.call import TaskHandle, ToolOutcome
from actors.run.context import Cancel
from actors.run.driver import RunDriver
from actors.run.recorder import now
from dag.budget import Budgets
from dag.events import (
    ErrorKind,
    JoinStarted,
    NodeDenied,
    NodeDispatched,
    NodeFailed,
    NodeRetryScheduled,
    NodeSucceeded,
    RuntimeFailure,
)
from dag.health import ToolHealth
from dag.retry import RetryPolicy
from dag.states import NodeStatus, RunStatus, StopReason
from mcp_server.contracts import CASEOPS_TOOLS, GET_CASE_SNAPSHOT
from mcp_server.planner import CASE_TOOL, POLICY_TOOL
from planner import Final, NeedsHuman
from tests.c102 import C102_RESULT, CASE_OUTPUT, POLICY_OUTPUT
from tests.run_fakes import (
    CASE_ARGS,
    FAST_RETRY,
    RUN_ID,
    TENANT,
    TOKENS,
    WAIT_S,
    Decide,
    Propose,
    RecordingSink,
    Scripted,
    ScriptedExecutor,
    ScriptedPlanner,
    assert_log_rebuilds,
    c102_script,
    call_key,
    drive,
    driver,
    failure,
    ok,
    only,
    policy_node,
    run_created,
    snapshot_node,
    transient,
)

SNAPSHOT_ONLY = {"nodes": [snapshot_node("case")]}


def snapshot_run(
    *answers: Scripted, **driver_options: Any
) -> tuple[RecordingSink, ScriptedExecutor, ScriptedPlanner, RunDriver]:
    """A run of one snapshot node whose call gets ``answers`` in turn; the planner then accepts anything."""
    sink = RecordingSink()
    executor = ScriptedExecutor({call_key(CASE_TOOL, CASE_ARGS): list(answers)})
    planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY), Decide(Final({}, citations=[])))
    return sink, executor, planner, driver(sink, executor, planner, **driver_options)


def attempts_of(sink: RecordingSink, node_id: str) -> list[int]:
    return [event.attempt for event in sink.of(NodeDispatched, node_id)]


# ---------------------------------------------------------------- retries


async def test_a_transient_failure_is_retried_and_succeeds_on_the_second_attempt() -> None:
    sink, executor, planner, run = snapshot_run(Scripted(transient()), Scripted(ok(CASE_OUTPUT)))
    created = run_created(planner="scripted")

    final = await drive(run, created)

    [retry] = sink.of(NodeRetryScheduled, "case")
    assert (retry.attempt, retry.error.code) == (1, "UPSTREAM_DOWN")
    assert attempts_of(sink, "case") == [1, 2]
    case = final.nodes["case"]
    assert (case.status, case.attempts, case.output) == (NodeStatus.SUCCEEDED, 2, CASE_OUTPUT)
    assert [call.attempt for call in executor.calls] == [1, 2]
    assert [TOKENS.verify(call.token).task_id for call in executor.calls] == [
        f"{RUN_ID}/case/1",
        f"{RUN_ID}/case/2",
    ]
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


@pytest.mark.parametrize("kind", sorted(set(ErrorKind) - {ErrorKind.TRANSIENT}))
async def test_a_failure_that_is_not_transient_is_not_retried(kind: ErrorKind) -> None:
    refused = failure(kind, "REFUSED", "the tool refused")
    sink, executor, planner, run = snapshot_run(Scripted(refused))
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert sink.of(NodeRetryScheduled) == []
    assert attempts_of(sink, "case") == [1]
    assert (final.nodes["case"].status, final.nodes["case"].error) == (NodeStatus.FAILED, refused.error)
    executor.assert_done()  # a second call would have been unscripted
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_tool_that_keeps_failing_transiently_fails_after_its_max_attempts() -> None:
    sink, executor, planner, run = snapshot_run(*(Scripted(transient(f"DOWN_{n}")) for n in (1, 2, 3)))
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert CASEOPS_TOOLS[CASE_TOOL].max_attempts == 3
    assert [event.attempt for event in sink.of(NodeRetryScheduled, "case")] == [1, 2]
    assert attempts_of(sink, "case") == [1, 2, 3]
    [failed] = sink.of(NodeFailed, "case")
    assert failed.error.code == "DOWN_3"  # the last attempt's error is the node's
    assert (final.nodes["case"].status, final.nodes["case"].attempts) == (NodeStatus.FAILED, 3)
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_tool_allowed_one_attempt_is_not_retried_after_a_transient_failure() -> None:
    once = dataclasses.replace(GET_CASE_SNAPSHOT, max_attempts=1)
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: once}
    sink, executor, planner, run = snapshot_run(Scripted(transient()), catalogue=catalogue)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert sink.of(NodeRetryScheduled) == []
    assert final.nodes["case"].status is NodeStatus.FAILED
    executor.assert_done()
    planner.assert_done()


async def test_a_call_that_outlives_its_timeout_fails_as_a_transient_timeout() -> None:
    quick = dataclasses.replace(GET_CASE_SNAPSHOT, timeout_s=0.05, max_attempts=1)
    _, executor, planner, run = snapshot_run(
        Scripted(ok(CASE_OUTPUT), gate=asyncio.Event()),
        catalogue={**CASEOPS_TOOLS, CASE_TOOL: quick},
        call_slack_s=0.05,  # the production slack is 5 s on top of the contract's timeout
    )
    created = run_created(planner="scripted")

    final = await drive(run, created)

    error = final.nodes["case"].error
    assert error is not None
    assert (error.kind, error.code) == (ErrorKind.TRANSIENT, "TIMEOUT")
    assert executor.cancelled == ["case"]
    executor.assert_done()
    planner.assert_done()


async def test_a_retry_waits_for_an_open_circuit_and_goes_as_its_probe() -> None:
    health = ToolHealth(threshold=1, first_cooloff_s=0.05)  # the first failure rests the tool briefly
    sink, executor, planner, run = snapshot_run(
        Scripted(transient()), Scripted(ok(CASE_OUTPUT)), health=health
    )
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert attempts_of(sink, "case") == [1, 2]
    assert sink.of(NodeFailed) == []
    assert (final.status, final.nodes["case"].status) == (RunStatus.COMPLETED, NodeStatus.SUCCEEDED)
    assert not health.is_open((TENANT, CASE_TOOL))  # the probe's success closed it
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_failures_during_an_outage_do_not_use_up_the_tools_attempts() -> None:
    # Three attempts are allowed; the tool fails five times, but from the first failure on the circuit is
    # open, so each failure is the tool's outage and the node waits for the next probe instead of failing.
    health = ToolHealth(threshold=1, first_cooloff_s=0.01, max_cooloff_s=0.02)
    answers = [*(Scripted(transient(f"DOWN_{n}")) for n in range(5)), Scripted(ok(CASE_OUTPUT))]
    sink, executor, planner, run = snapshot_run(*answers, health=health)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert CASEOPS_TOOLS[CASE_TOOL].max_attempts == 3
    assert attempts_of(sink, "case") == [1, 2, 3, 4, 5, 6]
    assert (final.status, final.nodes["case"].status) == (RunStatus.COMPLETED, NodeStatus.SUCCEEDED)
    executor.assert_done()
    planner.assert_done()


async def test_a_dead_worker_neither_uses_up_the_tools_attempts_nor_opens_its_circuit() -> None:
    health = ToolHealth(threshold=2)
    dead = [
        Scripted(failure(ErrorKind.TRANSIENT, RuntimeFailure.WORKER_FAILED, "ActorDiedError"))
        for _ in range(4)
    ]
    sink, executor, planner, run = snapshot_run(*dead, Scripted(ok(CASE_OUTPUT)), health=health)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert attempts_of(sink, "case") == [1, 2, 3, 4, 5]  # more than the tool's 3 attempts
    assert not health.is_open((TENANT, CASE_TOOL))
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_call_that_kills_its_worker_every_time_still_ends() -> None:
    retry = dataclasses.replace(FAST_RETRY, runtime_attempts=3)
    dead = [
        Scripted(failure(ErrorKind.TRANSIENT, RuntimeFailure.WORKER_FAILED, "ActorDiedError"))
        for _ in range(3)
    ]
    sink, executor, planner, run = snapshot_run(*dead, retry=retry)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert attempts_of(sink, "case") == [1, 2, 3]
    assert final.nodes["case"].status is NodeStatus.FAILED
    # Its answer was never learned: no verdict (here an empty Final) may rest on it.
    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.EVIDENCE_INCOMPLETE)
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_task_whose_follower_keeps_dying_while_its_caller_restarts_is_followed_never_called_again() -> (
    None
):
    # A caller killed mid-task restarts in seconds; meanwhile each follow meets it restarting. More deaths
    # than the three a follow once allowed: the task is followed on, after a dead worker's wait each time.
    handle = TaskHandle(server="caseops", task_id="task-1", status="working")
    dead = Scripted(failure(ErrorKind.TRANSIENT, RuntimeFailure.WORKER_FAILED, "ActorUnavailableError"))
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: dataclasses.replace(CASEOPS_TOOLS[CASE_TOOL], task=True)}
    started = ToolOutcome(output=None, error=None, started_at=now(), finished_at=now(), task=handle)
    sink, executor, _, run = snapshot_run(
        Scripted(started), *[dead] * 5, Scripted(ok(CASE_OUTPUT)), catalogue=catalogue
    )
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert final.status is RunStatus.COMPLETED
    assert attempts_of(sink, "case") == [1]  # never dispatched again
    first, *follows = executor.calls
    assert (first.as_task, first.task) == (True, None)
    assert [call.task.task_id if call.task else None for call in follows] == ["task-1"] * 6
    assert sink.of(NodeFailed) == []
    assert sink.of(NodeRetryScheduled) == []
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_each_exchange_following_a_task_carries_a_token_minted_for_it() -> None:
    # A task outlives the 60 s a token lives: a follow that reused the call's token would be refused by a
    # server that checks it (caseops answers 401) once the task ran past a minute.
    handle = TaskHandle(server="caseops", task_id="task-1", status="working")
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: dataclasses.replace(CASEOPS_TOOLS[CASE_TOOL], task=True)}
    working = Scripted(ToolOutcome(output=None, error=None, started_at=now(), finished_at=now(), task=handle))
    _, executor, _, run = snapshot_run(
        working, working, working, Scripted(ok(CASE_OUTPUT)), catalogue=catalogue
    )
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert final.status is RunStatus.COMPLETED
    tokens = [call.token for call in executor.calls]
    assert len(tokens) == 4  # the start and each of its three follows
    assert len(set(tokens)) == 4
    claims = [TOKENS.verify(token) for token in tokens]
    assert {claim.task_id for claim in claims} == {f"{RUN_ID}/case/1"}  # the same call, each time anew
    executor.assert_done()


async def test_a_task_whose_followers_always_die_ends_as_the_calls_runtime_failure() -> None:
    retry = dataclasses.replace(FAST_RETRY, runtime_attempts=3)
    handle = TaskHandle(server="caseops", task_id="task-1", status="working")
    dead = Scripted(failure(ErrorKind.TRANSIENT, RuntimeFailure.WORKER_FAILED, "ActorDiedError"))
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: dataclasses.replace(CASEOPS_TOOLS[CASE_TOOL], task=True)}
    started = ToolOutcome(output=None, error=None, started_at=now(), finished_at=now(), task=handle)
    sink, executor, _, run = snapshot_run(Scripted(started), *[dead] * 3, catalogue=catalogue, retry=retry)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert final.nodes["case"].status is NodeStatus.FAILED
    assert [event.error.code for event in sink.of(NodeFailed, "case")] == [RuntimeFailure.WORKER_FAILED]
    assert len(executor.calls) == 4  # the call, then its task followed after two deaths, the third final
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


class Door(asyncio.Event):
    """A gate that says when a call reached it (``reached``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reached = asyncio.Event()

    async def wait(self) -> Literal[True]:
        self.reached.set()
        return await super().wait()


async def followed_task(
    cancel: Cancel | None = None,
) -> tuple[ScriptedExecutor, Door, asyncio.Task[Any]]:
    """A run driven until its one call started a task whose follow is out, held at the door (the task runs
    on); once there, the executor's ``settled`` says when the follow ends, answered or cut short."""
    door = Door()
    handle = TaskHandle(server="caseops", task_id="task-1", status="working")
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: dataclasses.replace(CASEOPS_TOOLS[CASE_TOOL], task=True)}
    started = ToolOutcome(output=None, error=None, started_at=now(), finished_at=now(), task=handle)
    _, executor, _, run = snapshot_run(
        Scripted(started), Scripted(ok(CASE_OUTPUT), gate=door), catalogue=catalogue
    )
    driving = asyncio.create_task(drive(run, run_created(planner="scripted"), cancel))
    await asyncio.wait_for(door.reached.wait(), WAIT_S)
    executor.settled["case"].clear()
    return executor, door, driving


async def test_a_driver_cancelled_from_outside_lets_its_followed_task_go_unstopped() -> None:
    # A supervisor that lost the run's lease cancels its driver: the run's new owner follows the same task,
    # so the follow in flight must not be cancelled (a cancelled follow asks the server to stop the task).
    executor, door, driving = await followed_task()

    driving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await driving
    for _ in range(20):  # every cancellation the driver's end set off has run its course
        await asyncio.sleep(0)
    door.set()
    await asyncio.wait_for(executor.settled["case"].wait(), WAIT_S)

    assert executor.cancelled == []  # the follow was let go, never cut short: it ran to its answer
    assert not any(call.stop for call in executor.calls)


async def test_a_cancelled_run_cuts_its_tasks_follow_short_so_that_the_task_is_stopped() -> None:
    cancel = Cancel()
    executor, _, driving = await followed_task(cancel)

    cancel.set()
    final = await driving
    await asyncio.wait_for(executor.settled["case"].wait(), WAIT_S)

    assert (final.status, final.stop_reason) == (RunStatus.CANCELLED, StopReason.CANCELLED)
    assert executor.cancelled == ["case"]  # the executor stops the task of a follow it is cancelled in


class SlowRetry(RetryPolicy):
    """Every retry waits 5 s: long enough to act while it waits."""

    def delay(self, attempt: int, rng: random.Random) -> float:
        return 5.0


async def test_cancelling_while_a_retry_waits_ends_the_run_without_another_attempt() -> None:
    sink, executor, planner, run = snapshot_run(Scripted(transient()), retry=SlowRetry())
    created = run_created(planner="scripted")
    cancel = Cancel()
    running = asyncio.create_task(drive(run, created, cancel))
    await sink.reached(
        lambda state: "case" in state.nodes and state.nodes["case"].status is NodeStatus.RETRYING
    )

    cancel.set()
    final = await running

    assert (final.status, final.stop_reason) == (RunStatus.CANCELLED, StopReason.CANCELLED)
    assert attempts_of(sink, "case") == [1]
    assert final.nodes["case"].status is NodeStatus.CANCELLED
    executor.assert_done()
    assert planner.errors == []
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- the circuit breaker


async def test_an_open_circuit_makes_the_next_run_of_that_tenant_wait_and_never_touches_another_tenant() -> (
    None
):
    health = ToolHealth(threshold=3, first_cooloff_s=600.0)
    for _ in range(3):  # earlier calls of this tenant's failed: the tool rests for it
        health.record((TENANT, CASE_TOOL), transient().error, time.monotonic())
    assert health.resting(time.monotonic()) == frozenset({(TENANT, CASE_TOOL)})

    # Another tenant's run, through the same breaker: its call goes at once, and is shown every tool.
    other_sink, other_executor = RecordingSink(), ScriptedExecutor(only("case"))
    other_planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY), Decide(Final({}, citations=[])))
    other = driver(other_sink, other_executor, other_planner, health=health)
    created = run_created(planner="scripted", tenant_id="tenant-other")
    final = await drive(other, created)
    assert final.status is RunStatus.COMPLETED
    assert CASE_TOOL in {tool.name for tool in other_planner.proposing[0].tools}
    other_executor.assert_done()

    # The same tenant's next run: its call waits for the circuit, it is not denied or failed.
    next_sink, next_executor = RecordingSink(), ScriptedExecutor(only("policy"))
    next_planner = ScriptedPlanner(Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}))
    second = driver(next_sink, next_executor, next_planner, health=health)
    running = asyncio.create_task(drive(second, run_created(planner="scripted", run_id=str(uuid.uuid4()))))
    state = await next_sink.reached(
        lambda state: "policy" in state.nodes and state.nodes["policy"].status is NodeStatus.SUCCEEDED
    )
    assert state.nodes["case"].status is NodeStatus.PENDING
    assert next_sink.of(NodeDenied) == []
    assert next_sink.of(NodeFailed) == []
    assert next_executor.called == ["policy"]
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    next_executor.assert_done()


async def test_business_failures_never_open_the_circuit() -> None:
    health = ToolHealth(threshold=1, first_cooloff_s=600.0)
    refused = failure(ErrorKind.BUSINESS, "CASE_ARCHIVED", "the case is archived")
    _, executor, planner, run = snapshot_run(Scripted(refused), health=health)

    await drive(run, run_created(planner="scripted"))

    assert health.resting(time.monotonic()) == frozenset()
    assert not health.is_open((TENANT, CASE_TOOL))
    executor.assert_done()
    planner.assert_done()


# ---------------------------------------------------------------- max_parallel


def held_c102_script() -> dict[tuple[str, str], Scripted]:
    """The C-102 calls, each kept in flight for a moment so that overlapping calls would be seen."""
    return {key: dataclasses.replace(step, hold_s=0.01) for key, step in c102_script().items()}


async def test_max_parallel_one_never_has_two_calls_in_flight() -> None:
    sink, executor = RecordingSink(), ScriptedExecutor(held_c102_script())
    created = run_created(budgets=Budgets(max_parallel=1))

    final = await drive(driver(sink, executor), created)

    assert executor.most_in_flight == 1
    assert final.status is RunStatus.COMPLETED
    assert final.result == C102_RESULT
    for _, _, state in sink.appends:  # nor does any recorded state have two nodes running
        assert len(state.in_flight()) <= 1
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_max_parallel_one_holds_for_a_retry_too() -> None:
    # "case" fails and waits for its retry while "policy" takes the one slot: the retry must wait for it.
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}), Decide(Final({}, citations=[]))
    )
    script: dict[Any, Any] = {
        call_key(CASE_TOOL, CASE_ARGS): [Scripted(transient()), Scripted(ok(CASE_OUTPUT))],
        call_key(POLICY_TOOL, CASE_ARGS): Scripted(ok(POLICY_OUTPUT), hold_s=0.1),
    }
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(planner="scripted", budgets=Budgets(max_parallel=1))

    final = await drive(driver(sink, executor, planner), created)

    assert attempts_of(sink, "case") == [1, 2]
    assert executor.most_in_flight == 1
    assert final.status is RunStatus.COMPLETED
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_without_a_tight_max_parallel_the_independent_reads_overlap() -> None:
    # The control for the test above: the same script does overlap when the budget allows it.
    sink, executor = RecordingSink(), ScriptedExecutor(held_c102_script())
    created = run_created(budgets=Budgets(max_parallel=16))

    final = await drive(driver(sink, executor), created)

    assert executor.most_in_flight == 3
    assert final.status is RunStatus.COMPLETED
    executor.assert_done()


# ---------------------------------------------------------------- the deadline


async def test_the_deadline_stops_a_run_whose_call_blocks_and_cancels_the_call() -> None:
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}),
        Decide(NeedsHuman(StopReason.INSUFFICIENT_EVIDENCE, "no case snapshot")),
    )
    script = only("policy")
    script[call_key(CASE_TOOL, CASE_ARGS)] = Scripted(ok(CASE_OUTPUT), gate=asyncio.Event())  # never opened
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(planner="scripted", budgets=Budgets(deadline_s=0.5))

    # The call never answers: only a stop ends the run (and ``drive`` gives up after WAIT_S).
    final = await drive(driver(sink, executor, planner), created)

    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.DEADLINE_EXCEEDED)
    assert final.detail == "the run's deadline of 0.5s passed"
    [join] = sink.of(JoinStarted)
    assert join.at >= created.at + timedelta(seconds=0.5)  # not before the deadline: by the recorded clock
    async with asyncio.timeout(WAIT_S):
        await executor.settled["case"].wait()
    assert executor.cancelled == ["case"]
    assert final.nodes["case"].status is NodeStatus.CANCELLED
    assert final.nodes["policy"].status is NodeStatus.SUCCEEDED
    assert join.reason == final.detail  # the planner was still asked once, and told why
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_run_cut_short_by_the_deadline_stops_even_if_the_planner_has_a_verified_answer() -> None:
    planner = ScriptedPlanner(
        Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}),
        Decide(Final({"policy": POLICY_OUTPUT["evidence_ref"]}, citations=[POLICY_OUTPUT["evidence_ref"]])),
    )
    script = only("policy")
    script[call_key(CASE_TOOL, CASE_ARGS)] = Scripted(ok(CASE_OUTPUT), gate=asyncio.Event())
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(planner="scripted", budgets=Budgets(deadline_s=0.3))

    final = await drive(driver(sink, executor, planner), created)

    # The answer judged half of what the plan asked for: kept as partial, it completes nothing.
    assert (final.status, final.stop_reason) == (RunStatus.STOPPED, StopReason.DEADLINE_EXCEEDED)
    assert final.detail == "the run's deadline of 0.3s passed"
    assert final.result == {"policy": POLICY_OUTPUT["evidence_ref"]}
    assert final.nodes["case"].status is NodeStatus.CANCELLED
    planner.assert_done()
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


# ---------------------------------------------------------------- cancellation


class CancelsAsItAnswers(ScriptedExecutor):
    """Cancels the run as it gives the answer to its ``nth`` call (counted from 1)."""

    def __init__(self, script: Any, *, nth: int, cancel: Cancel) -> None:
        super().__init__(script)
        self._nth = nth
        self._cancel = cancel

    async def _perform(self, call: Any, step: Scripted) -> ToolOutcome:
        outcome = await super()._perform(call, step)
        if len(self.calls) == self._nth:
            self._cancel.set()
        return outcome


async def test_a_run_cancelled_as_its_task_reports_progress_asks_the_server_to_stop_the_task() -> None:
    # The cancel comes with a follow's news: the next follow is created as the news is recorded and cancelled
    # before it reaches the executor, so no follower is there to stop the task. The round asks the server.
    handle = TaskHandle(server="caseops", task_id="task-1", status="working")
    news = dataclasses.replace(handle, message="stage 2 of 24")
    catalogue = {**CASEOPS_TOOLS, CASE_TOOL: dataclasses.replace(CASEOPS_TOOLS[CASE_TOOL], task=True)}

    def pending(task: TaskHandle) -> Scripted:
        return Scripted(ToolOutcome(output=None, error=None, started_at=now(), finished_at=now(), task=task))

    cancel = Cancel()
    answers = [pending(handle), pending(news), pending(dataclasses.replace(handle, status="cancelled"))]
    executor = CancelsAsItAnswers({call_key(CASE_TOOL, CASE_ARGS): answers}, nth=2, cancel=cancel)
    planner = ScriptedPlanner(Propose(SNAPSHOT_ONLY))
    created = run_created(planner="scripted")

    final = await drive(driver(RecordingSink(), executor, planner, catalogue=catalogue), created, cancel)

    assert final.status is RunStatus.CANCELLED
    start, follow, stop = executor.calls
    assert (start.as_task, follow.task, follow.stop) == (True, handle, False)
    assert stop.stop
    assert stop.task is not None
    assert stop.task.task_id == "task-1"
    executor.assert_done()


async def test_cancelling_mid_round_ends_the_run_cancelled_and_dispatches_nothing_afterwards() -> None:
    # max_parallel=1 keeps "policy" waiting for the blocked "case": it is what would run next.
    planner = ScriptedPlanner(Propose({"nodes": [snapshot_node("case"), policy_node("policy")]}))
    script = only("policy")
    script[call_key(CASE_TOOL, CASE_ARGS)] = Scripted(ok(CASE_OUTPUT), gate=asyncio.Event())
    sink, executor = RecordingSink(), ScriptedExecutor(script)
    created = run_created(planner="scripted", budgets=Budgets(max_parallel=1))
    cancel = Cancel()
    running = asyncio.create_task(drive(driver(sink, executor, planner), created, cancel))
    async with asyncio.timeout(WAIT_S):
        await executor.invoked["case"].wait()
    dispatched_before = len(sink.of(NodeDispatched))

    cancel.set()
    final = await running

    assert (final.status, final.stop_reason) == (RunStatus.CANCELLED, StopReason.CANCELLED)
    async with asyncio.timeout(WAIT_S):
        await executor.settled["case"].wait()
    assert executor.cancelled == ["case"]
    assert executor.called == ["case"]
    assert dispatched_before == 1
    assert len(sink.of(NodeDispatched)) == 1
    assert sink.of(NodeSucceeded) == []
    assert sink.of(JoinStarted) == []  # a cancelled run does not ask the planner for a verdict
    assert {node.status for node in final.nodes.values()} == {NodeStatus.CANCELLED}
    assert executor.unused == [call_key(POLICY_TOOL, CASE_ARGS)]
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_cancelling_while_the_planner_thinks_ends_the_run_cancelled_before_any_plan() -> None:
    class SlowPlanner(ScriptedPlanner):
        def __init__(self) -> None:
            super().__init__()
            self.started = asyncio.Event()

        async def propose(self, context: Any) -> Any:
            self.started.set()
            await asyncio.Event().wait()  # never answers

    planner = SlowPlanner()
    sink, executor = RecordingSink(), ScriptedExecutor({})
    created = run_created(planner="scripted")
    cancel = Cancel()
    running = asyncio.create_task(drive(driver(sink, executor, planner), created, cancel))
    async with asyncio.timeout(WAIT_S):
        await planner.started.wait()

    cancel.set()
    final = await running

    assert (final.status, final.stop_reason) == (RunStatus.CANCELLED, StopReason.CANCELLED)
    assert final.nodes == {}
    executor.assert_done()
    assert_log_rebuilds(sink, created, final)


async def test_a_round_whose_only_ready_node_waits_for_its_tools_circuit_does_not_drain_without_it() -> None:
    # The tool rests for the tenant (another run's failures), and nothing else of this run is in flight: the
    # round must wait for the circuit, not drain and join with the node never run.
    health = ToolHealth(threshold=1, first_cooloff_s=0.2)
    health.record((TENANT, CASE_TOOL), transient().error, time.monotonic())
    sink, executor, planner, run = snapshot_run(Scripted(ok(CASE_OUTPUT)), health=health)
    created = run_created(planner="scripted")

    final = await drive(run, created)

    assert attempts_of(sink, "case") == [1]
    assert (final.status, final.nodes["case"].status) == (RunStatus.COMPLETED, NodeStatus.SUCCEEDED)
    executor.assert_done()
    planner.assert_done()
    assert_log_rebuilds(sink, created, final)

"""The ToolCaller's exchanges, driven in-process: what a cancel does whichever exchange Ray runs first."""

from __future__ import annotations

import asyncio
import pickle

from actors.calls.call import ToolCall, ToolOutcome
from actors.calls.caller import ToolCaller
from actors.calls.exchange import pack
from actors.calls.executors import MAX_NAMED_TOOLS, CallerPoolExecutor, exchange_name, task_name
from dag.events import RuntimeFailure
from mcp_server.contracts import CASEOPS_TOOLS

SNAPSHOT = "caseops_get_case_snapshot"


def unreachable_call() -> ToolCall:
    return ToolCall(
        run_id="caller-test",
        node_id="case",
        attempt=1,
        tool=SNAPSHOT,
        args={"case_id": "C-102"},
        mcp_url="http://127.0.0.1:9/mcp",  # nothing listens there: a started call would land as a failure
        token="t",
        timeout_s=5,
    )


async def test_a_call_cancelled_by_an_exchange_that_ran_before_it_arrived_never_starts() -> None:
    # Ray runs an async actor's calls out of order: the pool's cancel can overtake the call it cancels.
    caller = ToolCaller()
    contracts = {SNAPSHOT: CASEOPS_TOOLS[SNAPSHOT]}
    try:
        assert await caller.exchange("pool", [], {}, cancels=[7]) == []
        landed = await caller.exchange("pool", [(7, unreachable_call())], contracts, cancels=[])
        other = await caller.exchange("pool", [(8, unreachable_call())], contracts, cancels=[])
        status = await caller.ping()
    finally:
        await caller.stop()

    assert landed == []
    assert [ticket for ticket, _ in other] == [8]  # the next call runs as usual, and lands
    assert (status["calls"], status["in_flight"]) == (1, 0)


async def test_a_packed_exchange_hands_over_and_brings_back_what_an_exchange_does() -> None:
    caller = ToolCaller()
    contracts = {SNAPSHOT: CASEOPS_TOOLS[SNAPSHOT]}
    try:
        answer = await caller.packed_exchange(pack(("pool", [(3, unreachable_call())], contracts, [])))
    finally:
        await caller.stop()

    landed = pickle.loads(answer)
    assert [ticket for ticket, _ in landed] == [3]
    outcome = landed[0][1]
    assert isinstance(outcome, ToolOutcome)
    assert outcome.error is not None
    assert outcome.error.code == "CONNECTION_FAILED"  # the call was made: nothing listens there


async def test_an_exchange_answer_the_pool_cannot_unpack_fails_its_calls_rather_than_leaving_them_waiting() -> (
    None
):
    pool = CallerPoolExecutor(CASEOPS_TOOLS)
    [name] = pool.names
    lane = pool._lanes[name]
    waiting = asyncio.get_running_loop().create_future()
    lane.waiting[1] = waiting
    lane.exchanges = 1

    async def garbled() -> bytes:
        return b"not a pickle"

    await pool._receive(name, garbled(), upto=1)

    outcome = waiting.result()
    assert outcome.error is not None
    assert outcome.error.code == RuntimeFailure.WORKER_FAILED  # transient: the supervisor retries the call
    assert lane.exchanges == 0


def call_of(tool: str, node_id: str, run_id: str = "run-1") -> ToolCall:
    return ToolCall(
        run_id=run_id,
        node_id=node_id,
        attempt=1,
        tool=tool,
        args={},
        mcp_url="http://127.0.0.1:9/mcp",
        token="t",
        timeout_s=5,
    )


def test_an_exchange_is_named_for_its_tools_whatever_its_nodes_runs_and_count() -> None:
    """Ray keeps a counter per distinct task name for the life of each process that submits or runs one: a
    name holding node ids (or how many calls) grew the supervisor's memory with every run."""
    resolve = "caseops_resolve_document_alias"
    names = {
        exchange_name([call_of(resolve, f"resolve[{index}]", run) for index in range(count)])
        for run in ("run-1", "run-2")
        for count in (1, 5, 24)
    }
    mixed = exchange_name([call_of(resolve, "r"), call_of(SNAPSHOT, "case"), call_of(resolve, "s")])

    assert names == {task_name(resolve)} == {f"tool:{resolve}"}
    assert mixed == f"tool:{SNAPSHOT} tool:{resolve}"  # each tool once, in name order
    assert exchange_name([]) == "tool results"


def test_an_exchange_of_many_tools_names_a_few_and_counts_the_rest() -> None:
    tools = [f"tool_{letter}" for letter in "abcdefgh"[: MAX_NAMED_TOOLS + 2]]

    name = exchange_name([call_of(tool, f"n{index}") for index, tool in enumerate(reversed(tools))])

    assert name == " ".join(task_name(tool) for tool in tools[:MAX_NAMED_TOOLS]) + " +2 more"

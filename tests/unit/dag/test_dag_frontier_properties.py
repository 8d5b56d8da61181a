"""``Frontier``: the incremental frontier gives exactly the steps of a full rescan, on random DAGs and random
executions (nodes succeeding, failing, denied, expanded into children, settled; steps taken or left)."""

from __future__ import annotations

from typing import Any

from dag_run_builders import AT, PROPERTY_SETTINGS, dispatched, failed, running, succeeded
from hypothesis import given
from hypothesis import strategies as st

from dag.events import (
    ErrorKind,
    GroupSettled,
    NodeDenied,
    NodeError,
    NodeExpanded,
    NodeFailed,
    NodeSkipped,
    RunEvent,
)
from dag.policy import Decision
from dag.run_state import RunState, apply
from dag.scheduler import (
    Expand,
    Frontier,
    Ready,
    Settle,
    Skip,
    Step,
    Unresolvable,
    next_steps,
    resolve,
)
from dag.states import NodeStatus

DENY = Decision(allowed=False, rule_id="deny.test", reason="test")


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    """Up to 10 nodes, each waiting on earlier ones by reference or ``after``; some expand over a list."""
    nodes: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 10))):
        earlier = [node["id"] for node in nodes]
        node: dict[str, Any] = {"id": f"n{index}", "tool": "t", "args": {"i": index}}
        if earlier:
            refs = draw(st.lists(st.sampled_from(earlier), max_size=3, unique=True))
            for name in refs:
                node["args"][f"from_{name}"] = {"$ref": name, "pointer": "/value"}
            after = draw(st.lists(st.sampled_from(earlier), max_size=2, unique=True))
            if after:
                node["after"] = after
            if draw(st.booleans()):
                node["for_each"] = {"$ref": draw(st.sampled_from(earlier)), "pointer": "/items"}
                node["args"]["item"] = {"$item": ""}
        nodes.append(node)
    return {"nodes": nodes}


def _output(draw: st.DrawFn) -> dict[str, Any]:
    items = draw(st.lists(st.integers(0, 3), max_size=3))
    return {"value": draw(st.integers(0, 2)), "items": items} if draw(st.integers(0, 9)) else {"other": 1}


def _taken(state: RunState, step: Step, draw: st.DrawFn) -> RunEvent:
    match step:
        case Ready():
            if draw(st.integers(0, 5)) == 0:
                return NodeDenied(
                    at=AT,
                    node_id=step.node_id,
                    tool=step.tool,
                    args=step.args,
                    fingerprint=step.fingerprint,
                    decision=DENY,
                )
            return dispatched(step.node_id, step.tool, step.args)
        case Expand():
            return NodeExpanded(at=AT, node_id=step.node_id, count=step.count)
        case Settle():
            return GroupSettled(at=AT, node_id=step.node_id, succeeded=step.succeeded)
        case Skip():
            return NodeSkipped(at=AT, node_id=step.node_id, cause_node_id=step.cause_node_id)
        case Unresolvable():
            error = NodeError(kind=ErrorKind.CONTRACT, code=step.code, message=step.message)
            return NodeFailed(at=AT, node_id=step.node_id, error=error)
    raise AssertionError(step)


@given(plan=plans(), data=st.data())
@PROPERTY_SETTINGS
def test_the_incremental_frontier_gives_the_steps_of_a_full_rescan(plan: dict[str, Any], data: Any) -> None:
    draw = data.draw
    state = running(plan)
    frontier = Frontier()
    for _ in range(200):
        full = next_steps(state)
        kept = [
            resolve(state, step.node_id)
            if not isinstance(step, Expand | Settle | Skip | Unresolvable)
            else step
            for step in frontier.candidates(state)
        ]
        assert kept == full
        in_flight = [node for node in state.in_flight() if node.status is NodeStatus.RUNNING]
        if not full and not in_flight:
            return
        # Take some of the steps (a full max_parallel leaves the others), and let some calls land.
        events: list[RunEvent] = [
            _taken(state, step, draw)
            for index, step in enumerate(full)
            if not index or draw(st.integers(0, 3))
        ]
        for node in in_flight:
            if draw(st.booleans()) or not events:
                events.append(
                    succeeded(node.node_id, _output(draw))
                    if draw(st.integers(0, 4))
                    else failed(node.node_id)
                )
        for event in events:
            state = apply(state, event)
    raise AssertionError("the run did not drain in 200 steps")

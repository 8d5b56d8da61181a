"""What can happen next in a run: the scheduling decision, as data, from the state alone.

There are no waves: a node is ready the moment every node it depends on has an output.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dag.errors import ReferenceUnresolved
from dag.fingerprint import action_fingerprint
from dag.plan import PlanNode, dependencies, qualify
from dag.refs import resolve_args, resolve_pointer
from dag.run_state import NodeState, RunState
from dag.states import NodeStatus


@dataclass(frozen=True)
class Ready:
    """Arguments resolved; the node may be authorized, gated and dispatched."""

    node_id: str
    tool: str
    args: dict[str, Any]
    fingerprint: str


@dataclass(frozen=True)
class Expand:
    """A ``for_each`` source has its output: the node becomes one child per item."""

    node_id: str
    count: int


@dataclass(frozen=True)
class Settle:
    """Every child of a ``for_each`` node has ended."""

    node_id: str
    succeeded: bool


@dataclass(frozen=True)
class Skip:
    """A dependency ended without an output, so this node can never run."""

    node_id: str
    cause_node_id: str


@dataclass(frozen=True)
class Unresolvable:
    """A reference or ``for_each`` names data the upstream output does not have."""

    node_id: str
    code: str
    message: str


Step = Ready | Expand | Settle | Skip | Unresolvable


def next_steps(state: RunState) -> list[Step]:
    """Every step that can be taken now, in run order. Pure: the caller records and performs them."""
    steps: list[Step] = []
    for node_id in state.order:
        node = state.nodes[node_id]
        if node.is_group and node.status is NodeStatus.RUNNING:
            steps.extend(_settle(state, node))
        elif node.status is NodeStatus.PENDING:
            spec = state.spec_of(node)
            step = (
                _child_step(state, node, spec)
                if node.parent is not None
                else _plan_node_step(state, node, spec)
            )
            if step is not None:
                steps.append(step)
    return steps


def _settle(state: RunState, group: NodeState) -> list[Step]:
    assert group.children is not None
    children = [state.nodes[child] for child in group.children]
    if all(child.status.terminal for child in children):
        return [Settle(group.node_id, succeeded=all(child.status.has_output for child in children))]
    return []


def _plan_node_step(state: RunState, node: NodeState, spec: PlanNode) -> Step | None:
    for name in dependencies(spec):
        dependency = qualify(name, node.round)
        upstream = state.nodes[dependency]
        if not upstream.status.terminal:
            return None
        if not upstream.status.has_output:
            return Skip(node.node_id, cause_node_id=dependency)
    if spec.for_each is not None:
        source = qualify(spec.for_each.ref, node.round)
        try:
            items = resolve_pointer(state.output_of(source), spec.for_each.pointer, node_id=source)
        except ReferenceUnresolved as exc:
            return Unresolvable(node.node_id, "REFERENCE_UNRESOLVED", str(exc))
        if not isinstance(items, list):
            return Unresolvable(
                node.node_id,
                "FOR_EACH_NOT_A_LIST",
                f"for_each of {node.node_id!r} names a {type(items).__name__}, not a list",
            )
        return Expand(node.node_id, len(items))
    return _ready(state, node, spec, item=None)


def _child_step(state: RunState, node: NodeState, spec: PlanNode) -> Step:
    assert spec.for_each is not None
    assert node.index is not None
    source = qualify(spec.for_each.ref, node.round)
    items = resolve_pointer(state.output_of(source), spec.for_each.pointer, node_id=source)
    return _ready(state, node, spec, item=items[node.index], has_item=True)


def _ready(state: RunState, node: NodeState, spec: PlanNode, *, item: Any, has_item: bool = False) -> Step:
    outputs = _OutputView(state, node.round)
    try:
        if has_item:
            args = resolve_args(spec.args, outputs, node_id=node.node_id, item=item)
        else:
            args = resolve_args(spec.args, outputs, node_id=node.node_id)
    except ReferenceUnresolved as exc:
        return Unresolvable(node.node_id, "REFERENCE_UNRESOLVED", str(exc))
    return Ready(node.node_id, spec.tool, args, action_fingerprint(spec.tool, args))


class _OutputView(Mapping[str, Any]):
    """Outputs by the names a plan of ``round_number`` uses, looked up only when referenced."""

    def __init__(self, state: RunState, round_number: int) -> None:
        self._state = state
        self._round = round_number

    def __getitem__(self, name: str) -> Any:
        return self._state.output_of(qualify(name, self._round))

    def __iter__(self) -> Iterator[str]:
        return iter(self._state.nodes)

    def __len__(self) -> int:
        return len(self._state.nodes)

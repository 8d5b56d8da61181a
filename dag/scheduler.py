"""What can happen next in a run: the scheduling decision, as data, from the state alone.

There are no waves: a node is ready the moment every node it depends on has an output.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dag.errors import ReferenceUnresolved
from dag.fingerprint import action_fingerprint
from dag.plan import PlanNode, qualify
from dag.refs import resolve_args, resolve_pointer
from dag.run_state import NodeState, RunState
from dag.states import NodeStatus
from dag.storable import MAX_DEPTH, nests_deeper_than


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
    """A reference or ``for_each`` names data the upstream output does not have, or the arguments it resolves
    to nest deeper than a run can record."""

    node_id: str
    code: str
    message: str


Step = Ready | Expand | Settle | Skip | Unresolvable


@dataclass(frozen=True)
class Runnable:
    """Every dependency has its output; ``resolve`` turns it into ``Ready`` (or ``Unresolvable``). Kept apart
    so that a node ``max_parallel`` has no room for costs a dependency check, not a resolution."""

    node_id: str


Candidate = Runnable | Expand | Settle | Skip | Unresolvable


def next_steps(state: RunState) -> list[Step]:
    """Every step that can be taken now, in run order, from a scan of every node. Pure: the caller records and
    performs them. ``Frontier`` gives the same steps without the scan."""
    candidates = (_candidate(state, node_id) for node_id in state.order)
    return [_resolved(state, step) for step in candidates if step is not None]


def resolve(state: RunState, node_id: str) -> Ready | Unresolvable:
    """A runnable node's arguments, resolved against its dependencies' outputs, and their fingerprint."""
    node = state.nodes[node_id]
    spec = state.spec_of(node)
    if node.parent is None:
        return _ready(state, node, spec, item=None)
    assert spec.for_each is not None
    assert node.index is not None
    source = qualify(spec.for_each.ref, node.round)
    items = resolve_pointer(state.output_of(source), spec.for_each.pointer, node_id=source)
    return _ready(state, node, spec, item=items[node.index], has_item=True)


def _resolved(state: RunState, step: Candidate) -> Step:
    return resolve(state, step.node_id) if isinstance(step, Runnable) else step


def _candidate(state: RunState, node_id: str) -> Candidate | None:
    node = state.nodes[node_id]
    if node.is_group and node.status is NodeStatus.RUNNING:
        return _settle(state, node)
    if node.status is not NodeStatus.PENDING:
        return None
    if node.parent is not None:
        return Runnable(node_id)  # a child exists only once its group's source has its output
    return _plan_node_step(state, node, state.spec_of(node))


class Frontier:
    """The steps of ``next_steps``, kept as the run changes instead of rescanning every node on every step.

    A node is looked at again only when what it waits for may have changed: it is new, a node it waits for
    (a dependency; for a group, a child) ended, or it had a step last time, which the caller may not have
    taken. A pending node whose dependencies are not all done has no step until one of them ends, and a node
    ends only after a step of its own or a call: so watching the nodes with a step or a call out is enough.
    """

    def __init__(self) -> None:
        self._position: dict[str, int] = {}
        self._waiters: defaultdict[str, list[str]] = defaultdict(list)
        """Each node → the nodes that wait for it: its dependents and, for a child, its group."""
        self._known: set[str] = set()
        self._look: set[str] = set()
        self._watch: set[str] = set()

    def candidates(self, state: RunState) -> list[Candidate]:
        """What ``next_steps`` would return, with ready nodes left as ``Runnable``."""
        if len(state.nodes) != len(self._position):
            self._add_new(state)
        for node_id in [node_id for node_id in self._watch if state.nodes[node_id].status.terminal]:
            self._watch.discard(node_id)
            self._look.update(self._waiters[node_id])
        found: list[Candidate] = []
        for node_id in sorted(self._look, key=self._position.__getitem__):
            step = _candidate(state, node_id)
            if step is not None:
                found.append(step)
                self._watch.add(node_id)
                continue
            self._look.discard(node_id)
            node = state.nodes[node_id]
            if node.status.terminal:
                self._watch.discard(node_id)
                self._look.update(self._waiters[node_id])
            elif node.status is not NodeStatus.PENDING and not node.is_group:
                self._watch.add(node_id)  # a call is out: its end wakes the nodes that wait for it
        return found

    def _add_new(self, state: RunState) -> None:
        self._position = {node_id: position for position, node_id in enumerate(state.order)}
        for node_id in state.order:
            if node_id in self._known:
                continue
            self._known.add(node_id)
            self._look.add(node_id)
            node = state.nodes[node_id]
            if node.parent is not None:
                self._waiters[node_id].append(node.parent)  # its group settles when it ends
            else:
                for name in state.spec_of(node).dependencies:
                    self._waiters[qualify(name, node.round)].append(node_id)


def _settle(state: RunState, group: NodeState) -> Settle | None:
    assert group.children is not None
    children = [state.nodes[child] for child in group.children]
    if all(child.status.terminal for child in children):
        return Settle(group.node_id, succeeded=all(child.status.has_output for child in children))
    return None


def _plan_node_step(state: RunState, node: NodeState, spec: PlanNode) -> Candidate | None:
    for name in spec.dependencies:
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
    return Runnable(node.node_id)


def _ready(
    state: RunState, node: NodeState, spec: PlanNode, *, item: Any, has_item: bool = False
) -> Ready | Unresolvable:
    outputs = _OutputView(state, node.round)
    try:
        if has_item:
            args = resolve_args(spec.args, outputs, node_id=node.node_id, item=item)
        else:
            args = resolve_args(spec.args, outputs, node_id=node.node_id)
    except ReferenceUnresolved as exc:
        return Unresolvable(node.node_id, "REFERENCE_UNRESOLVED", str(exc))
    # The plan's arguments and each output are within MAX_DEPTH on their own; a reference nested in the
    # arguments adds its depth to the output's.
    if nests_deeper_than(args):
        return Unresolvable(
            node.node_id,
            "ARGUMENTS_TOO_DEEP",
            f"the arguments of {node.node_id!r} nest deeper than {MAX_DEPTH} arrays and objects once their "
            "references are resolved",
        )
    if spec.agent is not None:  # its action is its body and inputs; its tool, empty, is no tool's name
        body = spec.agent.model_dump(mode="json", exclude_none=True)
        fingerprint = action_fingerprint(spec.tool, {"agent": body, "args": args})
        return Ready(node.node_id, spec.tool, args, fingerprint)
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

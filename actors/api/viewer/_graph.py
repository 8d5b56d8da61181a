"""The edges of a run's DAG, from its plans' references: pure, so the viewer draws what the scheduler obeys."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict  # pydantic (FastAPI answers with it) needs this one before 3.12

from dag.plan import qualify
from dag.run_state import RunState

EdgeKind = Literal["depends", "for_each", "expands"]


class Edge(TypedDict):
    """``source`` must finish before ``target`` (``depends``, ``for_each``), or ``target`` is one of the
    children ``source`` expanded into (``expands``)."""

    source: str
    target: str
    kind: EdgeKind


def run_edges(state: RunState) -> list[Edge]:
    """Every edge of the run so far, in run order: each plan node's references, ``for_each`` source and
    ``after`` (``PlanNode.dependencies``, named as the run names them), and each group's children."""
    edges: list[Edge] = []
    for node_id in state.order:
        node = state.nodes[node_id]
        if node.parent is not None:
            edges.append(Edge(source=node.parent, target=node_id, kind="expands"))
            continue
        spec = state.spec_of(node)
        for name in spec.dependencies:
            source = qualify(name, node.round)
            if source not in state.nodes:
                continue  # validation rejects such plans; a viewer draws what exists
            kind: EdgeKind = (
                "for_each" if spec.for_each is not None and spec.for_each.ref == name else "depends"
            )
            edges.append(Edge(source=source, target=node_id, kind=kind))
    return edges

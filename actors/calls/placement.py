"""Where an actor that waits on I/O goes in a cluster of several nodes.

Ray's ``SPREAD`` is best effort, and an actor that asks for no resource at all is placed wherever Ray likes,
whatever it prefers: three actors meant for three nodes can all land on the first. ``spread`` gives the i-th of
``count`` such actors the i-th live node, softly (a node that is gone or full sends it elsewhere), with a sliver
of a CPU so that the preference counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PLACED_CPUS = 0.001
"""What an actor placed on a node of its own asks for: enough for Ray to honour the preference, nothing a
node's CPUs would miss."""


@dataclass(frozen=True, slots=True)
class Placement:
    """The scheduling options of one actor (``ray.remote(...).options(**placement.options())``)."""

    strategy: Any
    num_cpus: float

    def options(self) -> dict[str, Any]:
        return {"scheduling_strategy": self.strategy, "num_cpus": self.num_cpus}


ANYWHERE = Placement(strategy="SPREAD", num_cpus=0)


def spread(index: int, count: int) -> Placement:
    """The ``index``-th of ``count`` actors: the matching live node (softly) when there are several of each;
    else wherever Ray's ``SPREAD`` puts it."""
    if count < 2:
        return ANYWHERE
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))  # type: ignore[no-untyped-call]
    if len(alive) < 2:
        return ANYWHERE
    return Placement(
        NodeAffinitySchedulingStrategy(node_id=alive[index % len(alive)], soft=True), PLACED_CPUS
    )

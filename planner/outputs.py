"""The outputs planner: for a plan someone wrote, the run's result is what each of its nodes returned.

It proposes nothing (a run names its own plan, ``POST /runs {"plan": ...}`` or ``raydag run --plan``) and
judges no domain: the answer is every node's output by node id, once every node has one. It works over any
toolset, which the conformance planner (caseops' document check) does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dag.admission import PLAN_GIVEN_PLANNER
from dag.states import StopReason
from planner.base import Final, JoinDecision, NeedsHuman, Observation, PlanningContext, Uncalled


class PlanRequired(Exception):
    """The outputs planner was asked to plan: it only runs plans given with the run."""


class OutputsPlanner:
    name = PLAN_GIVEN_PLANNER

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        raise PlanRequired("the outputs planner proposes no plan: give the run a plan of its own")

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        return outputs_of(observations, context.uncalled)


def outputs_of(observations: Sequence[Observation], uncalled: Sequence[Uncalled] = ()) -> JoinDecision:
    """``{"outputs": {node_id: output}}`` when every node has an output; which ones have none otherwise
    (``uncalled``: the nodes that ended without a call, which no observation shows)."""
    missing = [
        f"{observation.node_id} ({observation.error.code if observation.error else observation.status})"
        for observation in observations
        if not observation.status.has_output
    ] + [f"{node.node_id} (never called: {node.reason})" for node in uncalled]
    if missing:
        return NeedsHuman(
            StopReason.EVIDENCE_INCOMPLETE,
            f"{len(missing)} node(s) have no output: {', '.join(missing[:20])}",
        )
    return Final(result={"outputs": {o.node_id: o.output for o in observations}}, citations=())

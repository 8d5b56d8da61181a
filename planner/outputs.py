"""The outputs planner: for a plan someone wrote, the run's result is what each of its nodes returned.

It proposes nothing (a run names its own plan, ``POST /runs {"plan": ...}`` or ``raydag run --plan``) and
judges no domain: the answer is every node's output by node id, once every node has one. It works over any
toolset, which the conformance planner (caseops' document check) does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dag.states import StopReason
from planner.base import Final, JoinDecision, NeedsHuman, Observation, PlanningContext


class PlanRequired(Exception):
    """The outputs planner was asked to plan: it only runs plans given with the run."""


class OutputsPlanner:
    name = "outputs"

    async def propose(self, context: PlanningContext) -> Mapping[str, Any]:
        raise PlanRequired("the outputs planner proposes no plan: give the run a plan of its own")

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        return outputs_of(observations)


def outputs_of(observations: Sequence[Observation]) -> JoinDecision:
    """``{"outputs": {node_id: output}}`` when every node has an output; which ones have none otherwise."""
    unanswered = [observation for observation in observations if not observation.status.has_output]
    if unanswered:
        named = ", ".join(
            f"{observation.node_id} ({observation.error.code if observation.error else observation.status})"
            for observation in unanswered[:20]
        )
        return NeedsHuman(
            StopReason.EVIDENCE_INCOMPLETE, f"{len(unanswered)} node(s) have no output: {named}"
        )
    return Final(result={"outputs": {o.node_id: o.output for o in observations}}, citations=())

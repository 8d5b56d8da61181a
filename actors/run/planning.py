"""What a run's planner is shown of it (``planning_context``): the tools it could use now, and what its rounds
observed, as data. The driver asks its planner with it; an agent node's parent builds its child's first one to
weigh that child's first model call before the child exists (``Intake.first_call_refusal``)."""

from __future__ import annotations

from actors.run.deps import RunDeps
from dag.policy import effective_tools
from dag.run_state import RunState
from planner.base import Observation, PlanningContext, ToolSpec, Uncalled
from planner.registry import MODEL_PLANNER


def planning_context(state: RunState, deps: RunDeps) -> PlanningContext:
    """What the planner is shown: only the tools this run could use right now, and observations as data."""
    tools = [  # a tool withdrawn under the run (its server unlisted, its definition changed) is not offered
        ToolSpec.of(contract)
        for name, contract in effective_tools(state.authority, deps.catalogue).items()
        if deps.withdrawal(name, state.tool_pins) is None
    ]
    return PlanningContext(
        resource=state.resource,
        goal=state.goal,
        tools=tools,
        round=state.round,
        observations=tuple(observations(state)),
        replan_reason=state.replan_reason,
        uncalled=uncalled(state),
        answers=state.answers,
        model=state.model,
        agents=(deps.agent_levels(state.depth) or 0) >= 1 and MODEL_PLANNER in deps.planners,
        inputs=state.parent.inputs if state.parent is not None else {},
        max_steps=state.max_steps,
    )


def uncalled(state: RunState) -> tuple[Uncalled, ...]:
    """The nodes that ended without a call (``PlanningContext.uncalled``), in run order. A ``for_each`` node
    is one of them when it never expanded (its list could not be read, or a node it depends on failed); once
    expanded, its children speak for it."""
    return tuple(
        Uncalled(node_id, node.tool, node.status, node.error)
        for node_id in state.order
        if (node := state.nodes[node_id]).args is None
        and node.status.terminal
        and not node.status.has_output
        and not node.children
    )


def observations(state: RunState) -> list[Observation]:
    """What the joiner sees: every node that was authorized or refused, in run order; groups excluded."""
    seen = []
    for node_id in state.order:
        node = state.nodes[node_id]
        if node.is_group or node.args is None:
            continue
        seen.append(Observation(node_id, node.tool, node.args, node.status, node.output, node.error))
    return seen

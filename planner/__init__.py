"""Planners behind one protocol: the ``outputs`` planner, the model planner, and any named by import path (caseops'
conformance planner is its toolset's, in ``mcp_server.planner``). Every plan they propose is untrusted."""

from planner.base import (
    Final,
    JoinDecision,
    NeedsHuman,
    Observation,
    Planner,
    PlanningContext,
    Replan,
    ToolSpec,
)
from planner.registry import BUILT_IN, MODEL_PLANNER, load_planners, unavailable_planners

__all__ = [
    "BUILT_IN",
    "MODEL_PLANNER",
    "Final",
    "JoinDecision",
    "NeedsHuman",
    "Observation",
    "Planner",
    "PlanningContext",
    "Replan",
    "ToolSpec",
    "load_planners",
    "unavailable_planners",
]

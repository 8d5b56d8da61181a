"""Planners: the conformance driver, and (later) model planners. Every plan they propose is untrusted."""

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
from planner.conformance import ConformancePlanner, DocumentCheckResult, Outcome
from planner.registry import BUILT_IN, MODEL_PLANNER, load_planners, unavailable_planners

__all__ = [
    "BUILT_IN",
    "MODEL_PLANNER",
    "ConformancePlanner",
    "DocumentCheckResult",
    "Final",
    "JoinDecision",
    "NeedsHuman",
    "Observation",
    "Outcome",
    "Planner",
    "PlanningContext",
    "Replan",
    "ToolSpec",
    "load_planners",
    "unavailable_planners",
]

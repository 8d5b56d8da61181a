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

PLANNERS: dict[str, type[ConformancePlanner]] = {"conformance": ConformancePlanner}

__all__ = [
    "PLANNERS",
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
]

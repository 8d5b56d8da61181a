"""Which planners a supervisor offers: the built-in ones, plus any named by import path."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from planner.base import Planner
from planner.conformance import ConformancePlanner
from planner.openai_planner import OpenAIPlanner, OpenAISettings

BUILT_IN: dict[str, type[Planner]] = {"conformance": ConformancePlanner}
MODEL_PLANNER = "openai"


def unavailable_planners(openai: OpenAISettings | None) -> dict[str, str]:
    """Planners this deployment knows but cannot offer, with the reason a request for one is refused."""
    if openai is None:
        return {MODEL_PLANNER: "the openai planner needs OPENAI_API_KEY, which this server does not have"}
    return {}


def load_planners(extra: Iterable[str] = (), openai: OpenAISettings | None = None) -> dict[str, Planner]:
    """One instance of each planner by its ``name``: the built-in ones, the model planner when it is
    configured, and ``extra`` ``"package.module:ClassName"`` paths."""
    planners: dict[str, Planner] = {name: cls() for name, cls in BUILT_IN.items()}
    if openai is not None:
        planners[MODEL_PLANNER] = OpenAIPlanner(openai)
    for path in extra:
        module_name, _, class_name = path.partition(":")
        if not module_name or not class_name:
            raise ValueError(f"planner {path!r} is not 'package.module:ClassName'")
        planner: Planner = getattr(importlib.import_module(module_name), class_name)()
        if planner.name in planners:
            raise ValueError(f"planner name {planner.name!r} of {path!r} is already taken")
        planners[planner.name] = planner
    return planners

"""Which planners a supervisor offers: the built-in ones, plus any named by import path."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from planner.base import Planner
from planner.conformance import ConformancePlanner

BUILT_IN: dict[str, type[Planner]] = {"conformance": ConformancePlanner}


def load_planners(extra: Iterable[str] = ()) -> dict[str, Planner]:
    """One instance of each planner by its ``name``. ``extra`` holds ``"package.module:ClassName"`` paths."""
    planners: dict[str, Planner] = {name: cls() for name, cls in BUILT_IN.items()}
    for path in extra:
        module_name, _, class_name = path.partition(":")
        if not module_name or not class_name:
            raise ValueError(f"planner {path!r} is not 'package.module:ClassName'")
        planner: Planner = getattr(importlib.import_module(module_name), class_name)()
        if planner.name in planners:
            raise ValueError(f"planner name {planner.name!r} of {path!r} is already taken")
        planners[planner.name] = planner
    return planners

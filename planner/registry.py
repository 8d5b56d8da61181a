"""Which planners a supervisor offers: the built-in ones, plus any named by import path."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from planner.answer import Answer
from planner.base import Planner
from planner.openai_planner import OpenAIPlanner, OpenAISettings
from planner.outputs import OutputsPlanner

BUILT_IN: dict[str, type[Planner]] = {OutputsPlanner.name: OutputsPlanner}
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
        answer = Answer if openai.answer_model is None else _imported(openai.answer_model, "answer model")
        if not (isinstance(answer, type) and issubclass(answer, BaseModel)):
            raise ValueError(f"answer model {openai.answer_model!r} is not a pydantic model")
        planners[MODEL_PLANNER] = OpenAIPlanner(openai, result_model=answer)
    for path in extra:
        planner: Planner = _imported(path, "planner")()
        if planner.name in planners:
            raise ValueError(f"planner name {planner.name!r} of {path!r} is already taken")
        planners[planner.name] = planner
    return planners


def _imported(path: str, what: str) -> Any:
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{what} {path!r} is not 'package.module:Name'")
    return getattr(importlib.import_module(module_name), attribute)

"""Tool contracts: what a tool is allowed to be, declared once and read by policy, planner and server."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel


class Risk(StrEnum):
    """What a tool call can do to the world."""

    READ_ONLY = "read_only"
    REVERSIBLE_WRITE = "reversible_write"
    IRREVERSIBLE_WRITE = "irreversible_write"


class Recording(StrEnum):
    """What the run's record keeps of a call's arguments and output."""

    FULL = "full"
    """Arguments and output as they were, for the API, the joiner and recovery."""
    DIGEST = "digest"
    """Read APIs show SHA-256 digests instead of the values (the event log still holds them for recovery)."""


INVESTIGATE = "investigate"
"""The run stage of a document check. A tool declares the stages it may be used in."""


@dataclass(frozen=True)
class ToolContract:
    """A tool's declared contract, not just its signature.

    - ``run_bound`` input fields are fixed by the run (``case_id`` is the run's case): a planner writes
      them, the policy checks them against the run before every dispatch.
    - ``observed_bound`` input fields must carry a value this run has already seen in a tool output
      (a ``document_id`` the run listed for its case), never one a planner made up.
    - Every other input field is proposable by a planner.
    """

    name: str
    version: str
    description: str
    scope: str
    risk: Risk
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    run_bound: frozenset[str] = field(default_factory=lambda: frozenset({"case_id"}))
    observed_bound: frozenset[str] = frozenset()
    stages: frozenset[str] = frozenset({INVESTIGATE})
    timeout_s: float = 10.0
    max_attempts: int = 3
    recording: Recording = Recording.FULL

    def __post_init__(self) -> None:
        inputs = set(self.input_model.model_fields)
        for bound in (self.run_bound, self.observed_bound):
            if not bound <= inputs:
                raise ValueError(f"{self.name}: bound fields {sorted(bound - inputs)} are not inputs")
        if self.max_attempts < 1 or self.timeout_s <= 0:
            raise ValueError(f"{self.name}: max_attempts must be >= 1 and timeout_s > 0")

    @property
    def idempotent(self) -> bool:
        """Read-only calls may be repeated: that is what makes a retry safe."""
        return self.risk is Risk.READ_ONLY

    @property
    def proposable(self) -> frozenset[str]:
        """Input fields a planner chooses freely."""
        return frozenset(self.input_model.model_fields) - self.run_bound - self.observed_bound

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    @cached_property
    def output_schema(self) -> dict[str, Any]:
        return self.output_model.model_json_schema()


ToolCatalogue = Mapping[str, ToolContract]
"""Tools by name."""


def catalogue_of(*contracts: ToolContract) -> dict[str, ToolContract]:
    """A catalogue keyed by tool name; a duplicate name is a programming error."""
    by_name: dict[str, ToolContract] = {}
    for contract in contracts:
        if contract.name in by_name:
            raise ValueError(f"duplicate tool contract {contract.name!r}")
        by_name[contract.name] = contract
    return by_name

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


@dataclass(frozen=True)
class ToolContract:
    """A tool's declared contract.

    ``run_bound`` names the input fields whose value is fixed by the run (never chosen by a planner):
    the policy checks them against the run before every dispatch.
    """

    name: str
    version: str
    description: str
    scope: str
    risk: Risk
    input_model: type[BaseModel]
    output_model: type[BaseModel]
    run_bound: frozenset[str] = field(default_factory=lambda: frozenset({"case_id"}))
    timeout_s: float = 10.0
    max_attempts: int = 1

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

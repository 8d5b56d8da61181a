"""The plan: an ordered list of tool nodes whose arguments may reference earlier nodes' outputs."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from dag.errors import PlanErrorCode, PlanInvalid

NODE_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class ForEach(BaseModel):
    """``{"$ref": NODE, "pointer": P}``: expand a node into one child per item of the list P names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    ref: str = Field(alias="$ref")
    pointer: str = ""


class PlanNode(BaseModel):
    """One proposed tool call. ``args`` may hold ``$ref`` and, under ``for_each``, ``$item`` markers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    tool: str
    args: dict[str, JsonValue] = Field(default_factory=dict)
    for_each: ForEach | None = None
    after: tuple[str, ...] = ()

    @field_validator("args")
    @classmethod
    def _finite_numbers_only(cls, args: dict[str, JsonValue]) -> dict[str, JsonValue]:
        if not _all_finite(args):
            raise ValueError("NaN and infinite numbers are not JSON")
        return args


def _all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(child) for child in value.values())
    if isinstance(value, list):
        return all(_all_finite(child) for child in value)
    return True


class Plan(BaseModel):
    """A DAG in topological order: a node may reference only nodes listed before it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: tuple[PlanNode, ...]

    @classmethod
    def parse(cls, data: Mapping[str, Any] | Any) -> Plan:
        """Parse untrusted JSON into a plan, or raise ``PlanInvalid(MALFORMED_PLAN)`` naming the spot."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            location = "/" + "/".join(str(part) for part in first["loc"])
            raise PlanInvalid(
                PlanErrorCode.MALFORMED_PLAN,
                f"plan does not have the plan format at {location}: {first['msg']}",
                location=location,
            ) from None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)

    def node(self, node_id: str) -> PlanNode:
        for candidate in self.nodes:
            if candidate.id == node_id:
                return candidate
        raise KeyError(node_id)


def dependencies(node: PlanNode) -> tuple[str, ...]:
    """The ids ``node`` waits for: its references, its ``for_each`` source and ``after``, in first-seen order."""
    from dag.refs import (
        NodeRef,
        iter_references,
    )  # refs imports nothing from here; kept local to stay acyclic

    seen: dict[str, None] = {}
    if node.for_each is not None:
        seen[node.for_each.ref] = None
    for _, reference in iter_references(node.args, node_id=node.id):
        if isinstance(reference, NodeRef):
            seen[reference.node] = None
    for after in node.after:
        seen[after] = None
    return tuple(seen)

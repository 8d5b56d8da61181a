"""The plan: an ordered list of tool nodes whose arguments may reference earlier nodes' outputs."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator

from dag.errors import PlanErrorCode, PlanInvalid
from dag.refs import NodeRef, iter_references

NODE_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
EARLIER_ROUND_REF = re.compile(r"^r([1-9][0-9]{0,2})\.([a-z0-9][a-z0-9_-]{0,63})$")
"""``r1.docs``: node ``docs`` of round 1, as a later round's plan names it."""


def qualified_id(round_number: int, node_id: str) -> str:
    """A node's id in the run: round 1 keeps its plan ids; later rounds are namespaced (``r2.docs``)."""
    return node_id if round_number == 1 else f"r{round_number}.{node_id}"


def qualify(target: str, round_number: int) -> str:
    """The run id a reference in a plan of ``round_number`` names: its own round's node, or an earlier one."""
    earlier = EARLIER_ROUND_REF.fullmatch(target)
    if earlier:
        return qualified_id(int(earlier.group(1)), earlier.group(2))
    return qualified_id(round_number, target)


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

    @field_validator("args", mode="before")
    @classmethod
    def _plain_bounded_json(cls, args: object) -> object:
        """Checked before parsing: deep nesting would exhaust the parser, NaN is not JSON."""
        _check_json(args, depth=0)
        return args

    @functools.cached_property
    def dependencies(self) -> tuple[str, ...]:
        """The names this node waits for: its references, its ``for_each`` source and ``after``, in first-seen
        order, as the plan writes them (``qualify`` turns them into run node ids). Found once per node: the
        scheduler asks on every step that looks at it. (Kept with the node: ``model_copy(update=...)``, which
        validates nothing, would keep it too; a changed node is parsed anew.)"""
        seen: dict[str, None] = {}
        if self.for_each is not None:
            seen[self.for_each.ref] = None
        for _, reference in iter_references(self.args, node_id=self.id):
            if isinstance(reference, NodeRef):
                seen[reference.node] = None
        for after in self.after:
            seen[after] = None
        return tuple(seen)


MAX_JSON_DEPTH = 32
"""How deeply JSON raydag accepts may nest, counted from its root: an API request body (checked on its raw
text before anything parses it) or a plan node's ``args``. Tool inputs are flat records; this leaves ample
room, and keeps every parser, validator and serializer after the check far from its recursion limit."""


def _check_json(value: object, depth: int) -> None:
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"args nest deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinite numbers are not JSON")
    if isinstance(value, dict):
        for child in value.values():
            _check_json(child, depth + 1)
    elif isinstance(value, list):
        for child in value:
            _check_json(child, depth + 1)


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

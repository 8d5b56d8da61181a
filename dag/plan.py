"""The plan: an ordered list of nodes (tool calls, or agents: child runs) whose arguments may reference earlier
nodes' outputs."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    field_validator,
    model_validator,
)

from dag.budget import BudgetRequest
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


GOAL_CAP = 4_000
"""The longest goal an agent node may give its child run, in characters (a run's own goal has the same cap)."""


MODEL_NAME_CAP = 200
"""The longest model name an agent node may ask for, as a run's ``model`` in ``POST /runs``."""
STEPS_CAP = 64
"""The most steps any loop agent may be given: each is a round of its model (a proposal and a judgement)."""


class AgentLoop(BaseModel):
    """A bounded model loop: at each step the model sees the goal, the inputs and the observations so far, and
    proposes the next calls, or answers. A loop still without an answer after ``max_steps`` steps stops
    (``STEP_LIMIT``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int = Field(ge=1, le=STEPS_CAP)


class AgentSpec(BaseModel):
    """An agent node's body: a child run with its own ``goal``, whose DAG is ``plan`` (given inline, validated
    like any plan), is planned by the named ``planner``, or is a ``loop`` of the deployment's model planner;
    ``model`` names the model a planned child asks (its tenant's policy decides whether it may); ``tools``
    narrows the parent's tools (``None``: the parent's own), ``budgets`` asks for budgets carved from what the
    parent has left (``dag.agents.carve``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    goal: str = Field(min_length=1, max_length=GOAL_CAP)
    plan: Plan | None = None
    planner: str | None = Field(default=None, min_length=1, max_length=64)
    loop: AgentLoop | None = None
    model: str | None = Field(default=None, min_length=1, max_length=MODEL_NAME_CAP)
    tools: tuple[str, ...] | None = None
    budgets: BudgetRequest | None = None

    @model_validator(mode="after")
    def _one_body(self) -> AgentSpec:
        if sum(body is not None for body in (self.plan, self.planner, self.loop)) != 1:
            raise ValueError(
                "an agent names exactly one of plan (a child DAG given inline), planner or loop (a model loop)"
            )
        if self.model is not None and self.plan is not None:
            raise ValueError("an agent with an inline plan asks no model: model goes with planner or loop")
        if self.loop is not None and self.budgets is not None and self.budgets.max_replans is not None:
            raise ValueError("a loop agent's rounds are its loop.max_steps: it takes no budgets.max_replans")
        return self

    @property
    def planned(self) -> bool:
        """Whether the child's DAG is written by a planner (a model's, for a loop) rather than given inline."""
        return self.plan is None

    @property
    def may_ask_models(self) -> bool:
        """Whether the child, or an agent of its inline plan at any depth, is planned: what tokens and cost
        carved for it are for."""
        if self.plan is None:
            return True
        return any(node.agent is not None and node.agent.may_ask_models for node in self.plan.nodes)


class PlanNode(BaseModel):
    """One proposed node: a tool call (``tool``), or an agent (``agent``): a child run of its own. ``args`` may
    hold ``$ref`` and, under ``for_each``, ``$item`` markers; an agent's ``args`` are its child's inputs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    tool: str = ""
    """The tool a call node calls; empty for an agent node."""
    agent: AgentSpec | None = None
    args: dict[str, JsonValue] = Field(default_factory=dict)
    for_each: ForEach | None = None
    after: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _tool_or_agent(self) -> PlanNode:
        if bool(self.tool) == (self.agent is not None):
            raise ValueError("a node names exactly one of tool or agent")
        if self.agent is not None and self.for_each is not None:
            raise ValueError("an agent node may not have for_each")
        return self

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

    def tools_named(self) -> tuple[str, ...] | None:
        """Every tool the plan may call, its agents' included, in first-seen order; ``None`` when an agent's
        planner may choose among all of its parent's tools."""
        seen: dict[str, None] = {}
        for node in self.nodes:
            agent = node.agent
            if agent is None:
                seen[node.tool] = None
                continue
            inner = agent.plan.tools_named() if agent.plan is not None else None
            named = agent.tools if agent.tools is not None else inner
            if named is None:
                return None
            seen.update(dict.fromkeys(named))
        return tuple(seen)

    def node(self, node_id: str) -> PlanNode:
        for candidate in self.nodes:
            if candidate.id == node_id:
                return candidate
        raise KeyError(node_id)


AgentSpec.model_rebuild()

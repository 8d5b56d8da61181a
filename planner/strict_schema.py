"""JSON Schemas for a model's structured output, in the strict-mode subset, and the check for that subset.

Strict structured output constrains decoding to the schema, so the schema must fit a subset: every object
lists all its properties as required and forbids others, and only some keywords are understood. Plans
are requested with one argument schema per effective tool; the joiner with one decision schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from dag.budget import NODES_CAP
from dag.plan import NODE_ID_PATTERN, STEPS_CAP
from planner.base import ToolSpec

SUPPORTED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "$ref",
        "$defs",
        "description",
        "title",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    }
)
"""Keywords strict mode accepts. Others (minLength, maxLength, default, oneOf, allOf, not, …) are refused."""

MAX_DEPTH = 10

MAX_CITATIONS = 256
"""``maxItems`` of the joiner's citations: a model left unbounded may write an array until its token limit."""


def strict_violations(schema: Mapping[str, Any]) -> list[str]:
    """Every way ``schema`` leaves the strict subset, as JSON Pointers with reasons; empty when it fits."""
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append("/: the root must be an object")

    def walk(node: Any, where: str, depth: int) -> None:
        if not isinstance(node, Mapping):
            return
        if depth > MAX_DEPTH:
            problems.append(f"{where}: nested deeper than {MAX_DEPTH}")
        for keyword in node:
            if keyword not in SUPPORTED_KEYWORDS:
                problems.append(f"{where}: unsupported keyword {keyword!r}")
        if node.get("type") == "object" or "properties" in node:
            if node.get("additionalProperties") is not False:
                problems.append(f"{where}: objects must set additionalProperties to false")
            properties = node.get("properties", {})
            if set(node.get("required", [])) != set(properties):
                problems.append(f"{where}: every property must be required")
            for name, child in properties.items():
                walk(child, f"{where}/properties/{name}", depth + 1)
        if "items" in node:
            walk(node["items"], f"{where}/items", depth + 1)
        for index, branch in enumerate(node.get("anyOf", [])):
            walk(branch, f"{where}/anyOf/{index}", depth + 1)
        for name, definition in node.get("$defs", {}).items():
            walk(definition, f"/$defs/{name}", 1)

    walk(schema, "", 0)
    return problems


def to_strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a pydantic-style JSON Schema narrowed to the strict subset.

    Unsupported keywords are dropped (the runtime still validates against the full contract), objects get
    ``additionalProperties: false``, and properties that were optional become required but nullable.
    """

    def narrow(node: Any) -> Any:
        if isinstance(node, list):
            return [narrow(item) for item in node]
        if not isinstance(node, Mapping):
            return node
        out: dict[str, Any] = {}
        for keyword, value in node.items():
            if keyword not in SUPPORTED_KEYWORDS:
                continue
            if keyword in ("properties", "$defs"):
                out[keyword] = {name: narrow(child) for name, child in value.items()}
            else:
                out[keyword] = narrow(value)
        if out.get("type") == "object" or "properties" in out:
            properties = out.setdefault("properties", {})
            optional = set(properties) - set(out.get("required", []))
            for name in optional:
                properties[name] = {"anyOf": [properties[name], {"type": "null"}]}
            out["required"] = list(properties)
            out["additionalProperties"] = False
        return out

    narrowed: dict[str, Any] = narrow(copy.deepcopy(dict(schema)))
    return narrowed


_NODE_REF = {
    "type": "object",
    "description": "The part of an earlier node's output that the JSON Pointer names ('' for all of it).",
    "properties": {"ref": {"type": "string"}, "pointer": {"type": "string"}},
    "required": ["ref", "pointer"],
    "additionalProperties": False,
}
_ITEM_REF = {
    "type": "object",
    "description": "Inside a for_each node: the part of the current item that the JSON Pointer names.",
    "properties": {"item": {"type": "string"}},
    "required": ["item"],
    "additionalProperties": False,
}


def plan_schema(
    tools: Sequence[ToolSpec], *, may_ask: bool = False, max_nodes: int = NODES_CAP, agents: bool = False
) -> dict[str, Any]:
    """The plan format for a model: one node branch per tool, each argument a literal or a reference; with
    ``may_ask``, also a ``question`` (a string, or null): the model's way to ask a person instead of planning;
    with ``agents``, also a loop agent node (``agent_branch``). ``max_nodes`` bounds the plan's nodes and each
    node's ``after`` (``maxItems``): an unbounded array runs to a small model's token limit.

    References are spelled ``{"ref", "pointer"}`` and ``{"item"}`` here (``from_model_plan`` turns them into
    the plan format's ``$ref``/``$item``), keeping ``$``-keywords out of property names.
    """
    definitions: dict[str, Any] = {"node_ref": _NODE_REF, "item_ref": _ITEM_REF}
    branches = []
    for tool in tools:
        inputs = to_strict(tool.input_schema)
        definitions.update(inputs.pop("$defs", {}))
        arguments = {
            name: {"anyOf": [schema, {"$ref": "#/$defs/node_ref"}, {"$ref": "#/$defs/item_ref"}]}
            for name, schema in inputs.get("properties", {}).items()
        }
        branches.append(
            {
                "type": "object",
                "description": tool.description,
                "properties": {
                    "id": {"type": "string", "pattern": NODE_ID_PATTERN.pattern},
                    "tool": {"type": "string", "enum": [tool.name]},
                    "args": {
                        "type": "object",
                        "properties": arguments,
                        "required": list(arguments),
                        "additionalProperties": False,
                    },
                    "for_each": {"anyOf": [{"$ref": "#/$defs/node_ref"}, {"type": "null"}]},
                    "after": {"type": "array", "items": {"type": "string"}, "maxItems": max_nodes},
                },
                "required": ["id", "tool", "args", "for_each", "after"],
                "additionalProperties": False,
            }
        )
    if agents and tools:
        branches.append(agent_branch(tools, max_nodes))
    properties: dict[str, Any] = {}
    if may_ask:  # first: a model writes its properties in order, and decides whether to ask before it plans
        properties["question"] = {"anyOf": [{"type": "string"}, {"type": "null"}]}  # cut to 2000 on arrival
    properties["nodes"] = {"type": "array", "items": {"anyOf": branches}, "maxItems": max_nodes}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        "$defs": definitions,
    }


def agent_branch(tools: Sequence[ToolSpec], max_nodes: int) -> dict[str, Any]:
    """A loop agent node as a model may write one (docs/AGENTS.md): a goal, its steps, the tools it may use (of
    the plan's own), and its inputs, each an earlier node's output named for the agent. Its model is the
    operator's and the tenant's choice, never the planning model's: the branch has none."""
    step_cap = {"type": "integer", "minimum": 1, "maximum": STEPS_CAP}
    names = [tool.name for tool in tools]
    named_input = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "ref": {"type": "string"}, "pointer": {"type": "string"}},
        "required": ["name", "ref", "pointer"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "description": "A sub-agent: a bounded investigation of its own, whose steps a model decides, over some "
        "of the tools; it returns its answer as its output. Its inputs are earlier nodes' outputs.",
        "properties": {
            "id": {"type": "string", "pattern": NODE_ID_PATTERN.pattern},
            "agent": {
                "type": "object",
                "properties": {
                    "goal": {"type": "string"},
                    "loop": {
                        "type": "object",
                        "properties": {"max_steps": step_cap},
                        "required": ["max_steps"],
                        "additionalProperties": False,
                    },
                    "tools": {
                        "type": "array",
                        "items": {"type": "string", "enum": names},
                        "maxItems": len(names),
                    },
                },
                "required": ["goal", "loop", "tools"],
                "additionalProperties": False,
            },
            "inputs": {"type": "array", "items": named_input, "maxItems": max_nodes},
            "after": {"type": "array", "items": {"type": "string"}, "maxItems": max_nodes},
        },
        "required": ["id", "agent", "inputs", "after"],
        "additionalProperties": False,
    }


def join_schema(result_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The joiner's answer: a decision, its reason, the result (for ``final``) and what the result cites."""
    result = to_strict(result_schema)
    definitions = result.pop("$defs", {})
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": ["final", "replan", "needs_human"]},
            "reason": {"type": "string"},
            "result": {"anyOf": [result, {"type": "null"}]},
            "citations": {
                "type": "array",
                "description": "Every identifier, reference and value the result states, as a tool output has it.",
                "items": {"type": "string"},
                "maxItems": MAX_CITATIONS,
            },
        },
        "required": ["decision", "reason", "result", "citations"],
        "additionalProperties": False,
    }
    if definitions:
        schema["$defs"] = definitions
    return schema


def from_model_plan(data: Any) -> Any:
    """The plan format from a model's plan: ``{"ref","pointer"}`` → ``$ref``, ``{"item"}`` → ``$item``,
    ``for_each: null`` and ``after: []`` dropped. Anything else passes through for validation to judge."""
    if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
        return data
    return {"nodes": [_node(node) for node in data["nodes"]]}


def _node(node: Any) -> Any:
    if not isinstance(node, Mapping):
        return node
    out = {key: value for key, value in node.items() if key not in ("for_each", "after", "args", "inputs")}
    out["args"] = _references(node.get("args")) if "inputs" not in node else _inputs(node["inputs"])
    if isinstance(node.get("for_each"), Mapping):
        out["for_each"] = {
            "$ref": node["for_each"].get("ref"),
            "pointer": node["for_each"].get("pointer", ""),
        }
    if node.get("after"):
        out["after"] = node["after"]
    return out


def _inputs(inputs: Any) -> Any:
    """An agent's inputs as its ``args``: each named input a reference to an earlier node's output."""
    if not isinstance(inputs, list) or not all(isinstance(item, Mapping) for item in inputs):
        return inputs  # for validation to judge
    return {
        str(item.get("name")): {"$ref": item.get("ref"), "pointer": item.get("pointer", "")}
        for item in inputs
    }


def _references(value: Any) -> Any:
    if isinstance(value, Mapping):
        if set(value) == {"ref", "pointer"}:
            return {"$ref": value["ref"], "pointer": value["pointer"]}
        if set(value) == {"item"}:
            return {"$item": value["item"]}
        return {key: _references(child) for key, child in value.items()}
    if isinstance(value, list):
        return [_references(child) for child in value]
    return value

"""Plan validation before anything runs: every failure has its own error code and location."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.protocols import Validator

from dag.contracts import ToolContract
from dag.errors import PlanErrorCode, PlanInvalid
from dag.plan import EARLIER_ROUND_REF, NODE_ID_PATTERN, AgentSpec, Plan, PlanNode
from dag.refs import ItemRef, Path, check_pointer, format_path, iter_references
from dag.schemas import validator as schema_validator
from dag.storable import unfit_values

FORBIDDEN_ARGUMENT_KEYS = frozenset(
    {
        "tenant",
        "tenant_id",
        "subject",
        "sub",
        "principal",
        "scope",
        "scopes",
        "token",
        "access_token",
        "authorization",
        "api_key",
        "credentials",
        "password",
        "secret",
    }
)
"""Identity and credentials come from authentication, never from a plan: a plan carrying them is rejected."""


Declared = Mapping[str, ToolContract | None]
"""Tools by name, a tool's contract ``None`` while its server has not been listed: a node naming it is checked
for everything but its arguments. A ``ToolCatalogue`` is one whose every contract is known."""


def validate_plan(
    plan: Plan,
    catalogue: Declared,
    *,
    max_nodes: int,
    round_number: int = 1,
    earlier: frozenset[str] = frozenset(),
    agent_levels: int | None = None,
) -> Plan:
    """Return ``plan`` if it may run against ``catalogue``; otherwise raise ``PlanInvalid``.

    ``earlier`` holds the names (``r1.docs``) of earlier rounds' nodes a replan may reference. ``agent_levels``
    is how many levels of agent nodes may nest below this plan (``None``: agent nodes are refused, as nothing
    would run them).
    """
    if not plan.nodes:
        raise PlanInvalid(PlanErrorCode.EMPTY_PLAN, "a plan needs at least one node", location="/nodes")
    if len(plan.nodes) > max_nodes:
        raise PlanInvalid(
            PlanErrorCode.TOO_MANY_NODES,
            f"the plan has {len(plan.nodes)} nodes; the run allows at most {max_nodes}",
            location="/nodes",
        )
    validator = PlanValidator(
        catalogue,
        max_nodes=max_nodes,
        round_number=round_number,
        earlier=earlier,
        announced={node.id for node in plan.nodes},
        agent_levels=agent_levels,
    )
    for node in plan.nodes:
        validator.add(node)
    return plan


class PlanValidator:
    """Validates a plan node by node, in order: the whole-plan check and a streamed plan's arrivals alike.

    With ``announced`` (every id of a whole plan) a reference to a later node is a ``FORWARD_REFERENCE``;
    in a streamed plan the later nodes are not known yet, so it is an ``UNKNOWN_REFERENCE``.
    """

    def __init__(
        self,
        catalogue: Declared,
        *,
        max_nodes: int,
        round_number: int = 1,
        earlier: frozenset[str] = frozenset(),
        announced: set[str] | None = None,
        agent_levels: int | None = None,
    ) -> None:
        self._catalogue = catalogue
        self._max_nodes = max_nodes
        self._round = round_number
        self._earlier = earlier
        self._seen: set[str] = set()
        self._announced = announced if announced is not None else self._seen
        self._agent_levels = agent_levels

    def add(self, node: PlanNode) -> None:
        index = len(self._seen)
        location = f"/nodes/{index}"
        if index + 1 > self._max_nodes:
            raise PlanInvalid(
                PlanErrorCode.TOO_MANY_NODES,
                f"the plan has more than {self._max_nodes} nodes, the most the run allows",
                location=location,
            )
        if not NODE_ID_PATTERN.fullmatch(node.id):
            raise PlanInvalid(
                PlanErrorCode.INVALID_NODE_ID,
                f"node id {node.id[:80]!r} does not match {NODE_ID_PATTERN.pattern}",
                location=f"{location}/id",
            )
        if node.id in self._seen:
            raise PlanInvalid(
                PlanErrorCode.DUPLICATE_NODE_ID,
                f"node id {node.id!r} is used twice",
                node_id=node.id,
                location=f"{location}/id",
            )
        if node.agent is not None:
            self._check_agent(node, node.agent, location)
        elif node.tool not in self._catalogue:
            raise PlanInvalid(
                PlanErrorCode.UNKNOWN_TOOL,
                f"tool {node.tool[:80]!r} is not in this run's tool catalogue",
                node_id=node.id,
                location=f"{location}/tool",
            )
        _check_no_identity_fields(node, location)
        _check_storable(node, location)
        _check_references(node, self._seen, self._announced, self._earlier, self._round, location)
        contract = self._catalogue.get(node.tool) if node.agent is None else None
        if contract is not None:
            _check_static_arguments(node, contract, location)
        self._seen.add(node.id)

    def _check_agent(self, node: PlanNode, agent: AgentSpec, location: str) -> None:
        """An agent node: allowed here, at most this plan's tools, its inline plan valid against those."""
        if self._agent_levels is None:
            raise PlanInvalid(
                PlanErrorCode.AGENT_NODES_UNAVAILABLE,
                f"node {node.id!r} is an agent node; this runtime does not run agent nodes yet",
                node_id=node.id,
                location=f"{location}/agent",
            )
        if self._agent_levels < 1:
            raise PlanInvalid(
                PlanErrorCode.AGENT_TOO_DEEP,
                f"node {node.id!r} is an agent nested deeper than the agent levels allowed",
                node_id=node.id,
                location=f"{location}/agent",
            )
        for position, tool in enumerate(agent.tools or ()):
            if tool not in self._catalogue:
                raise PlanInvalid(
                    PlanErrorCode.UNKNOWN_TOOL,
                    f"agent {node.id!r} asks for tool {tool[:80]!r}, which its parent is not offered",
                    node_id=node.id,
                    location=f"{location}/agent/tools/{position}",
                )
        if agent.plan is None:
            return  # its planner's plan is validated when the child run plans, as any planner's
        tools = (
            self._catalogue if agent.tools is None else {name: self._catalogue[name] for name in agent.tools}
        )
        try:
            validate_plan(agent.plan, tools, max_nodes=self._max_nodes, agent_levels=self._agent_levels - 1)
        except PlanInvalid as exc:
            inner = f"{location}/agent/plan{exc.location or ''}"
            raise PlanInvalid(
                exc.code, f"agent {node.id!r}: {exc.message}", node_id=node.id, location=inner
            ) from None


def _check_storable(node: PlanNode, location: str) -> None:
    """Arguments a run can record: a model may write a NUL, a lone surrogate or a non-finite number."""
    for pointer, reason in unfit_values(node.args):
        raise PlanInvalid(
            PlanErrorCode.INVALID_ARGUMENTS,
            f"node {node.id!r}: {reason}",
            node_id=node.id,
            location=f"{location}/args{pointer}",
        )


def _check_no_identity_fields(node: PlanNode, location: str) -> None:
    def walk(value: object, path: str) -> None:
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(key, str) and key.lower() in FORBIDDEN_ARGUMENT_KEYS:
                    raise PlanInvalid(
                        PlanErrorCode.FORBIDDEN_ARGUMENT,
                        f"node {node.id!r} carries {key!r}: tenant, identity and credentials never come from a plan",
                        node_id=node.id,
                        location=f"{path}/{key}",
                    )
                walk(child, f"{path}/{key}")
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, f"{path}/{index}")

    walk(node.args, f"{location}/args")


@dataclass(frozen=True)
class _Targets:
    """What a reference may name: nodes listed before it, or earlier rounds' nodes (``r1.docs``)."""

    seen: set[str]
    all_ids: set[str]
    earlier: frozenset[str]
    round_number: int


def _check_target(node: PlanNode, target: str, targets: _Targets, location: str) -> None:
    earlier_round = EARLIER_ROUND_REF.fullmatch(target)
    if earlier_round:
        if int(earlier_round.group(1)) < targets.round_number and target in targets.earlier:
            return
        raise PlanInvalid(
            PlanErrorCode.UNKNOWN_REFERENCE,
            f"node {node.id!r} refers to {target[:80]!r}, which no earlier round of this run has",
            node_id=node.id,
            location=location,
        )
    seen, all_ids = targets.seen, targets.all_ids
    if target == node.id:
        raise PlanInvalid(
            PlanErrorCode.SELF_REFERENCE,
            f"node {node.id!r} refers to itself",
            node_id=node.id,
            location=location,
        )
    if target in seen:
        return
    if target in all_ids:
        raise PlanInvalid(
            PlanErrorCode.FORWARD_REFERENCE,
            f"node {node.id!r} refers to {target!r}, which comes later in the plan",
            node_id=node.id,
            location=location,
        )
    raise PlanInvalid(
        PlanErrorCode.UNKNOWN_REFERENCE,
        f"node {node.id!r} refers to {target[:80]!r}, which is not in the plan",
        node_id=node.id,
        location=location,
    )


def _check_references(
    node: PlanNode,
    seen: set[str],
    all_ids: set[str],
    earlier: frozenset[str],
    round_number: int,
    location: str,
) -> None:
    targets = _Targets(seen, all_ids, earlier, round_number)
    if node.for_each is not None:
        check_pointer(node.for_each.pointer, node_id=node.id, location=f"{location}/for_each/pointer")
        _check_target(node, node.for_each.ref, targets, f"{location}/for_each")
    for path, reference in iter_references(node.args, node_id=node.id, location=location):
        where = location + format_path(path)
        if not path:
            raise PlanInvalid(
                PlanErrorCode.MALFORMED_REFERENCE,
                "args must be an object of named arguments; a reference may stand only for an argument's value",
                node_id=node.id,
                location=where,
            )
        if isinstance(reference, ItemRef):
            if node.for_each is None:
                raise PlanInvalid(
                    PlanErrorCode.ITEM_OUTSIDE_FOR_EACH,
                    f"node {node.id!r} uses $item but has no for_each",
                    node_id=node.id,
                    location=where,
                )
        else:
            _check_target(node, reference.node, targets, where)
    for position, after in enumerate(node.after):
        _check_target(node, after, targets, f"{location}/after/{position}")


def _check_static_arguments(node: PlanNode, contract: ToolContract, location: str) -> None:
    """Validate the literal parts of ``args``; a reference stands in for a value known only at run time."""
    reference_paths = [path for path, _ in iter_references(node.args, node_id=node.id)]
    for error in _validator(contract).iter_errors(node.args):
        error_path: Path = tuple(error.absolute_path)
        if any(error_path[: len(ref)] == ref for ref in reference_paths):
            continue
        raise PlanInvalid(
            PlanErrorCode.INVALID_ARGUMENTS,
            f"arguments of {node.id!r} do not fit {contract.name}: {error.message[:300]}",
            node_id=node.id,
            location=location + format_path(error_path),
        )


def check_arguments(contract: ToolContract, args: Mapping[str, Any]) -> str | None:
    """``None`` if resolved ``args`` fit the contract's input shape, else the first problem.

    For a pydantic-declared tool the model, not its published JSON Schema, is the final word; for a tool a
    server declared, its JSON Schema (``ToolContract.input_problem``).
    """
    return contract.input_problem(args)


@lru_cache(maxsize=256)
def _validator(contract: ToolContract) -> Validator:
    if contract.declared_input is not None:  # a server's schema, in the dialect it names
        return schema_validator(contract.declared_input)
    return Draft202012Validator(contract.input_schema)

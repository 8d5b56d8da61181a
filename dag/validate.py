"""Plan validation before anything runs: every failure has its own error code and location."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import ValidationError

from dag.contracts import ToolCatalogue, ToolContract
from dag.errors import PlanErrorCode, PlanInvalid
from dag.plan import NODE_ID_PATTERN, Plan, PlanNode
from dag.refs import ItemRef, Path, format_path, iter_references


def validate_plan(plan: Plan, catalogue: ToolCatalogue, *, max_nodes: int) -> Plan:
    """Return ``plan`` if it may run against ``catalogue``; otherwise raise ``PlanInvalid``."""
    if not plan.nodes:
        raise PlanInvalid(PlanErrorCode.EMPTY_PLAN, "a plan needs at least one node", location="/nodes")
    if len(plan.nodes) > max_nodes:
        raise PlanInvalid(
            PlanErrorCode.TOO_MANY_NODES,
            f"the plan has {len(plan.nodes)} nodes; the run allows at most {max_nodes}",
            location="/nodes",
        )
    earlier: set[str] = set()
    all_ids = {node.id for node in plan.nodes}
    for index, node in enumerate(plan.nodes):
        location = f"/nodes/{index}"
        if not NODE_ID_PATTERN.fullmatch(node.id):
            raise PlanInvalid(
                PlanErrorCode.INVALID_NODE_ID,
                f"node id {node.id[:80]!r} does not match {NODE_ID_PATTERN.pattern}",
                location=f"{location}/id",
            )
        if node.id in earlier:
            raise PlanInvalid(
                PlanErrorCode.DUPLICATE_NODE_ID,
                f"node id {node.id!r} is used twice",
                node_id=node.id,
                location=f"{location}/id",
            )
        contract = catalogue.get(node.tool)
        if contract is None:
            raise PlanInvalid(
                PlanErrorCode.UNKNOWN_TOOL,
                f"tool {node.tool[:80]!r} is not in this run's tool catalogue",
                node_id=node.id,
                location=f"{location}/tool",
            )
        _check_references(node, earlier, all_ids, location)
        _check_static_arguments(node, contract, location)
        earlier.add(node.id)
    return plan


def _check_target(node: PlanNode, target: str, earlier: set[str], all_ids: set[str], location: str) -> None:
    if target == node.id:
        raise PlanInvalid(
            PlanErrorCode.SELF_REFERENCE,
            f"node {node.id!r} refers to itself",
            node_id=node.id,
            location=location,
        )
    if target in earlier:
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


def _check_references(node: PlanNode, earlier: set[str], all_ids: set[str], location: str) -> None:
    if node.for_each is not None:
        from dag.refs import check_pointer

        check_pointer(node.for_each.pointer, node_id=node.id, location=f"{location}/for_each/pointer")
        _check_target(node, node.for_each.ref, earlier, all_ids, f"{location}/for_each")
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
            _check_target(node, reference.node, earlier, all_ids, where)
    for position, after in enumerate(node.after):
        _check_target(node, after, earlier, all_ids, f"{location}/after/{position}")


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
    """``None`` if resolved ``args`` fit the contract's input model, else the first problem.

    The model, not the published JSON Schema, is the final word: it is what the tool server applies, and
    Python's ``re`` lets a schema ``$`` match before a trailing newline where the model does not.
    """
    try:
        contract.input_model.model_validate(dict(args))
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{format_path(tuple(first['loc']))}: {first['msg'][:300]}"
    return None


@lru_cache(maxsize=256)
def _validator(contract: ToolContract) -> Draft202012Validator:
    return Draft202012Validator(contract.input_schema)

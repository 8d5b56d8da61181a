"""References inside arguments: finding them, checking their shape, and resolving them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonpointer

from dag.errors import PlanErrorCode, PlanInvalid, ReferenceUnresolved

REF_KEY = "$ref"
ITEM_KEY = "$item"

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class NodeRef:
    """``{"$ref": NODE, "pointer": P}``: part P of NODE's structured output."""

    node: str
    pointer: str = ""


@dataclass(frozen=True)
class ItemRef:
    """``{"$item": P}``: part P of the current ``for_each`` item."""

    pointer: str = ""


Reference = NodeRef | ItemRef


def check_pointer(pointer: object, *, node_id: str, location: str) -> str:
    """Return ``pointer`` if it is an RFC 6901 JSON Pointer, else raise ``PlanInvalid(INVALID_POINTER)``."""
    if not isinstance(pointer, str):
        raise PlanInvalid(
            PlanErrorCode.INVALID_POINTER, "a pointer must be a string", node_id=node_id, location=location
        )
    try:
        jsonpointer.JsonPointer(pointer)
    except jsonpointer.JsonPointerException as exc:
        raise PlanInvalid(
            PlanErrorCode.INVALID_POINTER,
            f"{pointer!r} is not a JSON Pointer: {exc}",
            node_id=node_id,
            location=location,
        ) from None
    return pointer


def _as_reference(value: Mapping[str, Any], *, node_id: str, location: str) -> Reference | None:
    if REF_KEY in value:
        if not set(value) <= {REF_KEY, "pointer"} or not isinstance(value[REF_KEY], str):
            raise PlanInvalid(
                PlanErrorCode.MALFORMED_REFERENCE,
                'a reference is {"$ref": NODE_ID, "pointer": JSON_POINTER} and nothing else',
                node_id=node_id,
                location=location,
            )
        pointer = check_pointer(value.get("pointer", ""), node_id=node_id, location=location)
        return NodeRef(node=value[REF_KEY], pointer=pointer)
    if ITEM_KEY in value:
        if set(value) != {ITEM_KEY}:
            raise PlanInvalid(
                PlanErrorCode.MALFORMED_REFERENCE,
                'an item reference is {"$item": JSON_POINTER} and nothing else',
                node_id=node_id,
                location=location,
            )
        return ItemRef(pointer=check_pointer(value[ITEM_KEY], node_id=node_id, location=location))
    return None


def iter_references(
    value: Any, *, node_id: str, path: Path = (), location: str = ""
) -> Iterator[tuple[Path, Reference]]:
    """Yield ``(path, reference)`` for every reference inside ``value``, outermost first.

    ``location`` prefixes the JSON Pointer that errors report (the node's place in the plan).
    """
    if isinstance(value, Mapping):
        reference = _as_reference(value, node_id=node_id, location=location + format_path(path))
        if reference is not None:
            yield path, reference
            return
        for key, child in value.items():
            yield from iter_references(child, node_id=node_id, path=(*path, key), location=location)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from iter_references(child, node_id=node_id, path=(*path, index), location=location)


def format_path(path: Path) -> str:
    """A JSON Pointer naming ``path`` inside a node's ``args``."""
    return "/args" + "".join("/" + pointer_token(part) for part in path)


def pointer_token(part: str | int) -> str:
    """A key or index as a JSON Pointer reference token (RFC 6901)."""
    return str(part).replace("~", "~0").replace("/", "~1")


def resolve_pointer(document: Any, pointer: str, *, node_id: str | None) -> Any:
    """The part of ``document`` that ``pointer`` names, or ``ReferenceUnresolved``."""
    try:
        found = jsonpointer.resolve_pointer(document, pointer)
    except jsonpointer.JsonPointerException as exc:
        raise ReferenceUnresolved(node_id, pointer, str(exc)) from None
    if isinstance(found, jsonpointer.EndOfList):  # RFC 6901: "-" names the element after the last one
        raise ReferenceUnresolved(node_id, pointer, "'-' names no existing element")
    return found


_NO_ITEM = object()


def resolve_args(
    value: Any,
    outputs: Mapping[str, Any],
    *,
    node_id: str,
    item: Any = _NO_ITEM,
) -> Any:
    """A copy of ``value`` with every reference replaced by the data it names.

    ``outputs`` maps node ids to structured outputs. Raises ``ReferenceUnresolved`` when a pointer names
    nothing; the plan was validated, so a missing node or a stray ``$item`` is a caller bug (KeyError).
    """
    if isinstance(value, Mapping):
        reference = _as_reference(value, node_id=node_id, location="")
        if isinstance(reference, NodeRef):
            return resolve_pointer(outputs[reference.node], reference.pointer, node_id=reference.node)
        if isinstance(reference, ItemRef):
            if item is _NO_ITEM:
                raise KeyError(f"{node_id}: $item outside for_each")
            return resolve_pointer(item, reference.pointer, node_id=None)
        return {key: resolve_args(child, outputs, node_id=node_id, item=item) for key, child in value.items()}
    if isinstance(value, list):
        return [resolve_args(child, outputs, node_id=node_id, item=item) for child in value]
    return value

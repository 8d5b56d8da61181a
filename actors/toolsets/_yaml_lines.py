"""YAML with the line of every value, and validation errors that name the file, the line and the field.

``yaml.compose`` gives the node tree with marks; values are built from it here (scalars by PyYAML's safe
constructor) so each value's path maps to the line of its key. A duplicate key, which ``yaml.safe_load``
would resolve silently to the last one, is an error. Error messages never repeat the value they refuse: a
misplaced secret must not reach a log through its own error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import ValidationError

from dag.errors import RaydagError

Path = tuple[str | int, ...]


class ToolsetsInvalid(RaydagError):
    """A toolsets file that cannot be used; the operator must fix the file (or the server it names)."""

    def __init__(
        self, source: str, line: int | None, field: str | None, message: str, more: Sequence[str] = ()
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.message = message
        self.more = tuple(more)
        where = f"{source}:{line}" if line is not None else source
        text = f"{where}: {field}: {message}" if field else f"{where}: {message}"
        super().__init__("\n".join((text, *self.more)))


@dataclass(frozen=True)
class LocatedYaml:
    """A parsed document and the line (1-based) of each path in it."""

    source: str
    value: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor the document has."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


def format_field(path: Path) -> str:
    """``("servers", 0, "auth", "env")`` → ``servers[0].auth.env``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def parse_located(text: str, source: str) -> LocatedYaml:
    """Parse one YAML document whose top level is a mapping; ``ToolsetsInvalid`` otherwise."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise ToolsetsInvalid(source, None, None, "is empty")
        lines: dict[Path, int] = {(): root.start_mark.line + 1}
        value = _build(loader, root, (), lines, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise ToolsetsInvalid(
            source, line, None, f"is not valid YAML: {exc.problem or exc.context}"
        ) from None
    except yaml.YAMLError as exc:
        raise ToolsetsInvalid(source, None, None, f"is not valid YAML ({type(exc).__name__})") from None
    finally:
        loader.dispose()
    if not isinstance(value, dict):
        raise ToolsetsInvalid(source, 1, None, "must be a mapping with a 'servers' list")
    return LocatedYaml(source, value, lines)


def _build(loader: yaml.SafeLoader, node: yaml.Node, path: Path, lines: dict[Path, int], source: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        built: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise ToolsetsInvalid(source, line, format_field(path), "keys must be plain strings")
            key = loader.construct_object(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in built:
                raise ToolsetsInvalid(source, line, format_field((*path, key)), "is given twice")
            lines[(*path, key)] = line
            built[key] = _build(loader, value_node, (*path, key), lines, source)
        return built
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            items.append(_build(loader, item, (*path, index), lines, source))
        return items
    return loader.construct_object(node)


def document_path(document: LocatedYaml, location: Sequence[str | int]) -> tuple[Path, Path]:
    """(the part of a pydantic error location the document has, the whole location as fields).

    Pydantic puts a discriminated union's tag (``stdio``, ``bearer``) into the location; it is not a key of
    the document, so it is dropped from both."""
    present: list[str | int] = []
    fields: list[str | int] = []
    value: Any = document.value
    found = True
    for part in location:
        indexable = isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)
        if found and ((isinstance(value, dict) and part in value) or indexable):
            value = value[part]
            present.append(part)
        elif found and isinstance(value, dict) and isinstance(part, str) and _is_tag(value, part):
            continue
        else:
            found = False
        fields.append(part)
    return tuple(present), tuple(fields)


def _is_tag(mapping: dict[Any, Any], part: str) -> bool:
    tags = ("none", "raydag-token", "bearer", "oauth-client-credentials")
    return part in (mapping.get("transport"), mapping.get("mode"), *tags)


def located_error(exc: ValidationError, document: LocatedYaml) -> ToolsetsInvalid:
    """The first error of ``exc`` placed in ``document``, the others listed after it."""
    problems: list[tuple[int | None, str, str]] = []
    for error in _causes(exc.errors(include_input=False, include_url=False)):
        location = tuple(error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            location += (str((error.get("ctx") or {}).get("discriminator", "")).strip("'"),)
            message = _tag_message(error)
        present, fields = document_path(document, location)
        problems.append((document.line_of(present), format_field(fields), message))
    problems.sort(key=lambda problem: problem[0] or 0)
    line, name, message = problems[0]
    more = [f"{document.source}:{line}: {name}: {text}" for line, name, text in problems[1:]]
    return ToolsetsInvalid(document.source, line, name or None, message, more)


def _causes(errors: Sequence[Any]) -> list[Any]:
    """``errors`` without those that only follow from another: pydantic-core checks a tuple's ``min_length``
    against the items that validated, so a server that fails makes ``servers`` "too short after validation"
    as well, an error placed on line 1 that would be reported before the server's own."""
    return [
        error
        for error in errors
        if error["type"] != "too_short"
        or not any(
            len(other["loc"]) > len(error["loc"]) and other["loc"][: len(error["loc"])] == error["loc"]
            for other in errors
        )
    ]


def _tag_message(error: Any) -> str:
    context = error.get("ctx") or {}
    expected = context.get("expected_tags", "")
    tag = context.get("discriminator", "").strip("'")
    return f"{tag} must be one of {expected}" if expected else f"needs a {tag}"

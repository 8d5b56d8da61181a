"""What a server listed: its tools' definitions as it published them, and the protocol version it spoke."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dag.fingerprint import canonical_json


@dataclass(frozen=True)
class ToolDefinition:
    """One tool of a ``tools/list`` answer, as JSON values (camelCase keys, as on the wire)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    title: str | None = None
    annotations: dict[str, Any] | None = None
    """Hints (``readOnlyHint``, ``destructiveHint``, ...): never a grant of anything."""
    task_support: str = "forbidden"
    """``execution.taskSupport``: whether the server runs a call of the tool as an MCP task (``required``,
    ``optional``) or only answers it at once (``forbidden``, the default)."""

    @classmethod
    def of(cls, tool: dict[str, Any]) -> ToolDefinition:
        """From a tool as the wire has it (``Tool.model_dump(mode="json", by_alias=True)``)."""
        return cls(
            name=str(tool["name"]),
            description=str(tool.get("description") or ""),
            input_schema=dict(tool.get("inputSchema") or {}),
            output_schema=tool.get("outputSchema"),
            title=tool.get("title"),
            annotations=tool.get("annotations"),
            task_support=_task_support(tool.get("execution")),
        )

    def hint(self, name: str) -> bool | None:
        """An annotation's value, or ``None`` when the server did not say."""
        value = (self.annotations or {}).get(name)
        return value if isinstance(value, bool) else None

    @property
    def definition(self) -> dict[str, Any]:
        """What a pin covers: everything that tells a planner or the runtime what the tool is."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
        }

    def __hash__(self) -> int:
        return hash(canonical_json(self.definition))


@dataclass(frozen=True)
class ServerListing:
    """Every tool one server listed, in its order, and the protocol version the listing was made in."""

    server: str
    protocol_version: str
    tools: tuple[ToolDefinition, ...]

    def tool(self, name: str) -> ToolDefinition | None:
        return next((tool for tool in self.tools if tool.name == name), None)

    def renamed(self, renames: Mapping[str, str]) -> ServerListing:
        """The listing with each tool named ``renames[name]`` where it has an entry (the names raydag offers
        them under). A tool the server lists under a name another tool is renamed to can never be offered,
        and is left out."""
        if not renames:
            return self
        taken = set(renames.values())
        tools = tuple(
            dataclasses.replace(tool, name=renames[tool.name]) if tool.name in renames else tool
            for tool in self.tools
            if tool.name in renames or tool.name not in taken
        )
        return dataclasses.replace(self, tools=tools)


def _task_support(execution: Any) -> str:
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in ("required", "optional") else "forbidden"

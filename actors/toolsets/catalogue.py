"""From what servers listed and what the operator declared to the contracts a run may use.

The overlay decides; the server only describes. A tool the server lists but the overlay does not name is
never offered (fail closed). A tool the overlay names but the server does not list, a run-bound field its
schema does not take, a schema that is not valid JSON Schema, or an overlay calling read-only a tool the
server says writes, is a start-up error: ``ToolsetMismatch``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.toolsets.config import HttpServer, StdioServer, ToolOverlay, Toolsets
from actors.toolsets.listing import ServerListing, ToolDefinition
from actors.toolsets.pinning import definition_digest, pins_of
from dag.contracts import Risk, RunBinding, ToolContract, catalogue_of
from dag.errors import RaydagError
from dag.schemas import JsonSchema, SchemaInvalid
from dag.writes import META_CARRIER


class ToolsetMismatch(RaydagError):
    """A server's listing does not fit its declaration; the operator must fix one or the other."""

    def __init__(self, server: str, tool: str | None, problem: str) -> None:
        self.server = server
        self.tool = tool
        self.problem = problem
        where = f"server {server!r}, tool {tool!r}" if tool else f"server {server!r}"
        super().__init__(f"{where}: {problem}")


def _check_hints(server: str, tool: ToolDefinition, overlay: ToolOverlay) -> None:
    """Hints never grant a risk, but a server that says its tool writes is believed over a read-only claim."""
    if overlay.risk is not Risk.READ_ONLY:
        return
    if tool.hint("destructiveHint") is True:
        raise ToolsetMismatch(server, tool.name, "declared read_only, but the server marks it destructive")
    if tool.hint("readOnlyHint") is False:
        raise ToolsetMismatch(
            server, tool.name, "declared read_only, but the server says it is not read-only"
        )


def _text_fields(server: str, tool: ToolDefinition, names: frozenset[str]) -> frozenset[str]:
    """``names``, each a string property of the tool's output schema, or a ``ToolsetMismatch``."""
    properties = (tool.output_schema or {}).get("properties", {})
    for name in sorted(names):
        if not isinstance(properties.get(name), dict) or properties[name].get("type") != "string":
            raise ToolsetMismatch(server, tool.name, f"split_lines names {name!r}, not a string output field")
    return names


def _without_argument(server: str, tool: ToolDefinition, schema: Any, name: str) -> Any:
    """``schema`` without the argument raydag sets itself (the idempotency key): a planner never sees it, a
    plan is checked without it, and the call adds it."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or name not in properties:
        raise ToolsetMismatch(
            server, tool.name, f"idempotency_key names {name!r}, which the tool does not take"
        )
    trimmed = dict(schema)
    trimmed["properties"] = {key: value for key, value in properties.items() if key != name}
    if isinstance(schema.get("required"), list):
        trimmed["required"] = [key for key in schema["required"] if key != name]
    return trimmed


def contract_of(spec: HttpServer | StdioServer, tool: ToolDefinition, overlay: ToolOverlay) -> ToolContract:
    """One tool's contract: shapes from the server, everything else from the overlay."""
    _check_hints(spec.name, tool, overlay)
    input_schema = tool.input_schema
    operation = overlay.operation
    if operation is not None and operation.idempotency_key not in (None, META_CARRIER):
        assert operation.idempotency_key is not None
        input_schema = _without_argument(spec.name, tool, input_schema, operation.idempotency_key)
    try:
        declared_input = JsonSchema.of(input_schema)
        declared_output = JsonSchema.of(tool.output_schema) if tool.output_schema is not None else None
    except SchemaInvalid as exc:
        raise ToolsetMismatch(spec.name, tool.name, str(exc)) from None
    try:
        return ToolContract(
            name=tool.name,
            version=definition_digest(tool),
            description=tool.description or tool.title or tool.name,
            scope=overlay.scope,
            risk=overlay.risk,
            declared_input=declared_input,
            declared_output=declared_output,
            run_bound=frozenset(overlay.run_bound),
            resource_keys=tuple(
                RunBinding(name, binding.resource, binding.match)
                for name, binding in sorted(overlay.run_bound.items())
            ),
            observed_bound=overlay.observed_bound,
            stages=overlay.stages,
            timeout_s=overlay.timeout_s if overlay.timeout_s is not None else spec.timeouts.call_s,
            max_attempts=overlay.max_attempts,
            recording=overlay.recording,
            server=spec.name,
            split_lines=_text_fields(spec.name, tool, overlay.split_lines),
            max_output_bytes=overlay.max_output_bytes or spec.max_output_bytes,
            max_content_blocks=overlay.max_content_blocks or spec.max_content_blocks,
            operation=operation.spec() if operation is not None else None,
            task=tool.task_support != "forbidden" or overlay.task,
        )
    except ValueError as exc:  # a bound field the tool's schema does not take
        raise ToolsetMismatch(spec.name, tool.name, str(exc).removeprefix(f"{tool.name}: ")) from None


def contracts_of(spec: HttpServer | StdioServer, listing: ServerListing) -> dict[str, ToolContract]:
    """The contracts of the tools the overlay names, in the overlay's order."""
    contracts: dict[str, ToolContract] = {}
    for name, overlay in spec.tools.items():
        tool = listing.tool(name)
        if tool is None:
            raise ToolsetMismatch(spec.name, name, "is declared, but the server does not list it")
        contracts[name] = contract_of(spec, tool, overlay)
    return contracts


@dataclass(frozen=True)
class ToolsetCatalogue:
    """Every server's listing, the contracts of the tools raydag offers, and their pins."""

    toolsets: Toolsets
    listings: Mapping[str, ServerListing]
    contracts: Mapping[str, ToolContract]

    @property
    def pins(self) -> dict[str, dict[str, str]]:
        """Server → offered tool → definition digest: what a run records when it starts."""
        return {
            server.name: pins_of(self.listings[server.name], frozenset(server.tools))
            for server in self.toolsets.servers
        }

    @property
    def unoffered(self) -> dict[str, tuple[str, ...]]:
        """Server → tools it lists that the overlay does not name (never offered)."""
        return {
            server.name: tuple(t.name for t in self.listings[server.name].tools if t.name not in server.tools)
            for server in self.toolsets.servers
        }


def build_catalogue(toolsets: Toolsets, listings: Mapping[str, ServerListing]) -> ToolsetCatalogue:
    """Contracts for every server of ``toolsets`` from its listing; ``ToolsetMismatch`` on the first misfit."""
    contracts: list[ToolContract] = []
    for server in toolsets.servers:
        listing = listings.get(server.name)
        if listing is None:
            raise ToolsetMismatch(server.name, None, "has no listing")
        contracts.extend(contracts_of(server, listing).values())
    return ToolsetCatalogue(toolsets, dict(listings), catalogue_of(*contracts))

"""Toolsets: the MCP servers raydag calls, declared in one file, listed, turned into contracts and pinned.

What other packages use is re-exported here:

- ``load_toolsets(path) -> Toolsets`` / ``configured_toolsets()`` (``RAYDAG_TOOLSETS``); ``ToolsetsInvalid``
  names the file, line and field of a malformed file.
- ``discover(server)`` → ``ServerListing``; ``discover_toolsets(toolsets)`` → ``ToolsetCatalogue`` (contracts
  and pins); ``build_catalogue`` does the same from listings in hand; ``ToolsetMismatch`` and
  ``ServerUnreachable`` are the start-up errors.
- ``definition_digest``, ``pins_of``, ``compare`` and ``relist`` → ``PinChanges``: tool-definition pinning.

The discovery names load on first use (PEP 562): the MCP client imports this package's config, and
discovery imports the client.
"""

from typing import TYPE_CHECKING, Any

from actors.toolsets._yaml_lines import ToolsetsInvalid
from actors.toolsets.catalogue import ToolsetCatalogue, ToolsetMismatch, build_catalogue, contract_of
from actors.toolsets.config import (
    CASEOPS_TOOLSETS,
    TOOLSETS_ENV,
    BearerAuth,
    HttpServer,
    NoAuth,
    RaydagTokenAuth,
    ServerSpec,
    StdioServer,
    ToolOverlay,
    Toolsets,
    caseops_toolsets,
    configured_toolsets,
    load_toolsets,
    parse_toolsets,
)
from actors.toolsets.credentials import CredentialUnavailable
from actors.toolsets.listing import ServerListing, ToolDefinition
from actors.toolsets.pinning import PinChanges, ToolPins, compare, definition_digest, pins_of

if TYPE_CHECKING:
    from actors.toolsets.discovery import ServerUnreachable, TokenFor, discover, discover_toolsets, relist

_DISCOVERY = frozenset({"ServerUnreachable", "TokenFor", "discover", "discover_toolsets", "relist"})


def __getattr__(name: str) -> Any:
    if name in _DISCOVERY:
        from actors.toolsets import discovery

        return getattr(discovery, name)
    raise AttributeError(f"module 'actors.toolsets' has no attribute {name!r}")


__all__ = [
    "CASEOPS_TOOLSETS",
    "TOOLSETS_ENV",
    "BearerAuth",
    "CredentialUnavailable",
    "HttpServer",
    "NoAuth",
    "PinChanges",
    "RaydagTokenAuth",
    "ServerListing",
    "ServerSpec",
    "ServerUnreachable",
    "StdioServer",
    "TokenFor",
    "ToolDefinition",
    "ToolOverlay",
    "ToolPins",
    "ToolsetCatalogue",
    "ToolsetMismatch",
    "Toolsets",
    "ToolsetsInvalid",
    "build_catalogue",
    "caseops_toolsets",
    "compare",
    "configured_toolsets",
    "contract_of",
    "definition_digest",
    "discover",
    "discover_toolsets",
    "load_toolsets",
    "parse_toolsets",
    "pins_of",
    "relist",
]

"""Toolsets: the MCP servers raydag calls, declared in one file, listed, turned into contracts and pinned.

What other packages use is re-exported here:

- ``load_toolsets(path) -> Toolsets`` / ``configured_toolsets()`` (``RAYDAG_TOOLSETS``); ``ToolsetsInvalid``
  names the file, line and field of a malformed file.
- ``build_catalogue`` → ``ToolsetCatalogue`` (contracts and pins) from listings in hand; ``ToolsetMismatch``
  is the start-up error of a listing that does not fit its declaration.
- ``definition_digest``, ``pins_of`` and ``compare`` → ``PinChanges``: tool-definition pinning.

Listing a server is the MCP client's (``actors.calls.mcp.discovery``: ``discover``, ``discover_toolsets``,
``relist``); this package only declares, and builds from what was listed.
"""

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
    "StdioServer",
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
    "load_toolsets",
    "parse_toolsets",
    "pins_of",
]

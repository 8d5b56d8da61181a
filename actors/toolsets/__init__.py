"""Toolsets: the MCP servers raydag calls, declared in one file, turned into contracts and pinned.

- ``config``: the file's model (servers, auth, overlays, ``planner``, ``hosting``) and loading it;
- ``_yaml_lines``: a malformed file's error, placed at its line;
- ``credentials``: a server's own secrets, read where the call is made;
- ``listing``: what a server listed; ``catalogue``: contracts built from a listing and its overlays;
- ``pinning``: each tool's definition digest, and what changed since it was pinned;
- ``withdrawal``: a declared tool that may not be called now, and why.

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
    TOOLSETS_ENV,
    BearerAuth,
    HttpServer,
    NoAuth,
    RaydagTokenAuth,
    ServerSpec,
    StdioServer,
    ToolOverlay,
    Toolsets,
    configured_toolsets,
    load_toolsets,
    parse_toolsets,
)
from actors.toolsets.credentials import CredentialUnavailable
from actors.toolsets.listing import ServerListing, ToolDefinition
from actors.toolsets.pinning import PinChanges, ToolPins, compare, definition_digest, pins_of

__all__ = [
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
    "compare",
    "configured_toolsets",
    "contract_of",
    "definition_digest",
    "load_toolsets",
    "parse_toolsets",
    "pins_of",
]

"""Listing what toolset servers offer, over the transport and in the era each declares, and re-listing it.

``discover`` opens a connection of its own for one server (a stdio server is started for the listing and
stopped after it); ``discover_toolsets`` lists every server at once and builds the catalogue; ``relist``
compares a server's listing now with the pins a run recorded. A server that cannot be listed is a
``ServerUnreachable`` naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from actors.calls.mcp.session import describe
from actors.toolsets.catalogue import ToolsetCatalogue, build_catalogue
from actors.toolsets.config import HttpServer, RaydagTokenAuth, StdioServer, Toolsets
from actors.toolsets.listing import ServerListing
from actors.toolsets.pinning import PinChanges, compare
from dag.errors import RaydagError

if TYPE_CHECKING:  # the client imports this package's config: import it when it is used, not before
    from actors.calls.mcp import McpConnections

TokenFor = Callable[[HttpServer], str]
"""Mints a task token for listing a ``raydag-token`` server (its URL as audience)."""


class ServerUnreachable(RaydagError):
    """A toolset server could not be started, reached or listed within its connect timeout."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        self.reason = reason
        super().__init__(f"server {server!r} cannot be listed: {reason}")


def _token(spec: HttpServer | StdioServer, token_for: TokenFor | None) -> str | None:
    if isinstance(spec, HttpServer) and isinstance(spec.auth, RaydagTokenAuth):
        if token_for is None:
            raise ServerUnreachable(spec.name, "it takes raydag task tokens, and no token_for was given")
        return token_for(spec)
    return None


async def discover(
    spec: HttpServer | StdioServer,
    *,
    token_for: TokenFor | None = None,
    connections: McpConnections | None = None,
) -> ServerListing:
    """Every tool ``spec``'s server lists, and the protocol version it answered in.

    Over ``connections`` if given (a ``ToolCaller``'s own, whose stdio servers stay up), else over
    connections opened for this listing alone."""
    from actors.calls.mcp import McpConnections

    token = _token(spec, token_for)
    try:
        async with asyncio.timeout(spec.timeouts.connect_s):
            if connections is not None:
                return await connections.list_tools(spec.name, token)
            async with McpConnections([spec]) as fresh:
                return await fresh.list_tools(spec.name, token)
    except TimeoutError:
        raise ServerUnreachable(spec.name, f"no answer within {spec.timeouts.connect_s:g}s") from None
    except RaydagError:
        raise
    except Exception as exc:  # anything that stops a listing names the server; its text may echo secrets
        raise ServerUnreachable(spec.name, describe(exc)) from None


async def discover_toolsets(toolsets: Toolsets, *, token_for: TokenFor | None = None) -> ToolsetCatalogue:
    """List every server at once and build the catalogue; the first unreachable server or misfit raises."""
    listings = await asyncio.gather(*(discover(spec, token_for=token_for) for spec in toolsets.servers))
    return build_catalogue(toolsets, {listing.server: listing for listing in listings})


async def relist(
    spec: HttpServer | StdioServer,
    pins: Mapping[str, str],
    *,
    token_for: TokenFor | None = None,
    connections: McpConnections | None = None,
) -> PinChanges:
    """What changed on ``spec``'s server since ``pins`` (tool → digest) were taken, among its offered tools."""
    listing = await discover(spec, token_for=token_for, connections=connections)
    return compare(pins, listing, frozenset(spec.tools))

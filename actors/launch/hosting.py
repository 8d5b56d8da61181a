"""A toolset raydag hosts itself, as its declaration names it (``hosting`` in a toolsets file): its server
served where ``RAYDAG_MCP_URL`` is unset, its tables migrated, its seed loaded, its demo.

The runtime knows the worked example (caseops) only through these names in ``mcp_server/caseops.yaml``; it
imports nothing of it. Each name's contract is in docs/TOOLSETS.md ("Hosting a toolset").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import asyncpg

from actors.store.migrate import Schema
from actors.toolsets.config import Demo, Hosting, Toolsets, imported_callable
from dag.tokens import TaskTokens

MCP_PATH = "/mcp"
"""Where a hosted server answers, on whatever host and port serves it."""
LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*")
"""``Host`` values a hosted server accepts by default (DNS-rebinding protection); ``RAYDAG_MCP_ALLOWED_HOSTS``
says otherwise."""
LOOPBACK_ORIGINS = tuple(f"http://{host}" for host in LOOPBACK_HOSTS)

SeedLoader = Callable[[asyncpg.Connection, Path | None], Awaitable[dict[str, int]]]


class HostedServer(Protocol):
    """What ``hosting.server`` returns: an MCP server raydag serves."""

    async def asgi(self, scope: Any, receive: Any, send: Any) -> None:
        """The MCP endpoint, to route at ``MCP_PATH`` inside another app."""

    def asgi_app(self) -> Any:
        """An app of its own answering at ``MCP_PATH``, its lifespan included."""

    def lifespan(self) -> AbstractAsyncContextManager[None]:
        """What the server needs while it serves (its database pool), for an app that routes to ``asgi``."""


@dataclass(frozen=True)
class HostedToolset:
    """The hosting a toolsets file declares, its names resolved when used."""

    hosting: Hosting

    @property
    def serves(self) -> bool:
        return self.hosting.server is not None

    def server(
        self,
        *,
        dsn: str,
        tokens: TaskTokens,
        latency_ms: int = 0,
        pool_size: int = 4,
        allowed_hosts: tuple[str, ...] = LOOPBACK_HOSTS,
        allowed_origins: tuple[str, ...] = LOOPBACK_ORIGINS,
    ) -> HostedServer:
        """The hosted server, built by the declared factory; ``LookupError`` if none is declared."""
        if self.hosting.server is None:
            raise LookupError("this toolset declares no hosted server")
        factory = imported_callable(self.hosting.server)
        return cast(
            HostedServer,
            factory(
                dsn=dsn,
                tokens=tokens,
                latency_ms=latency_ms,
                pool_size=pool_size,
                allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins,
            ),
        )

    @property
    def schemas(self) -> tuple[Schema, ...]:
        """The toolset's own migrations, applied with raydag's where this process hosts its server."""
        migrations = self.hosting.migrations
        return (Schema(migrations.package, table=migrations.table),) if migrations is not None else ()

    @property
    def seed(self) -> SeedLoader | None:
        return cast(SeedLoader, imported_callable(self.hosting.seed)) if self.hosting.seed else None

    @property
    def demo(self) -> Demo | None:
        return self.hosting.demo


def hosted(toolsets: Toolsets | None) -> HostedToolset | None:
    """What ``toolsets`` has raydag host, if anything."""
    return HostedToolset(toolsets.hosting) if toolsets is not None and toolsets.hosting is not None else None


def hosted_server_of(toolsets: Toolsets | None) -> HostedToolset | None:
    """What ``toolsets`` has raydag host when that includes a server (``hosting.server``); ``None`` when they
    host none: servers of your own (stdio, or HTTP raydag does not serve) are called where they are."""
    hosting = hosted(toolsets)
    return hosting if hosting is not None and hosting.serves else None

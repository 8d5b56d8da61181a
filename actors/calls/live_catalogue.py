"""The catalogue a running supervisor offers: its toolsets discovered, kept listed, and their tools withdrawn
when a server cannot be reached or changes a pinned tool.

``contracts`` is one dict, updated in place: the run driver, the API's views and the policy read the same
mapping, so a server that comes up later adds its tools for the next plan without anyone being rebuilt. A
contract, once built, is never replaced: it is the definition every run pinned. A server that lists a changed
definition for an offered tool gets that tool *withdrawn* (``TOOL_DEFINITION_CHANGED``), never re-trusted
until the operator restarts the supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from actors.calls.mcp.discovery import ServerUnreachable, TokenFor, discover
from actors.toolsets.catalogue import ToolsetMismatch, contracts_of
from actors.toolsets.config import HttpServer, StdioServer, Toolsets
from actors.toolsets.listing import ServerListing
from actors.toolsets.pinning import PinChanges, compare, pins_of
from actors.toolsets.withdrawal import DEFINITION_CHANGED_RULE, SERVER_UNREACHABLE_RULE, Withdrawal
from dag.contracts import ToolContract
from dag.states import StopReason

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5
RETRY_MAX_S = 30.0
RELIST_EVERY_S = 30.0


Lister = Callable[[HttpServer | StdioServer], Awaitable[ServerListing]]
"""Lists one server (``discover`` with the supervisor's token minting, by default)."""


class LiveCatalogue:
    """The toolsets' contracts as their servers list them now, and what is wrong with any of them."""

    def __init__(
        self,
        toolsets: Toolsets,
        *,
        token_for: TokenFor | None = None,
        lister: Lister | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.toolsets = toolsets
        self.contracts: dict[str, ToolContract] = {}
        self.withdrawn: dict[str, Withdrawal] = {}
        """Declared tools that may not be called now, by name."""
        self.unreachable: dict[str, str] = {}
        """Server → why it could not be listed (until it is)."""
        self.changes: dict[str, PinChanges] = {}
        """Server → how its offered tools differ from the definitions pinned at its first listing."""
        self._pins: dict[str, dict[str, str]] = {}
        self.pins: dict[str, str] = {}
        """Tool → the digest of the definition pinned at its server's first listing (what runs record)."""
        self._eras: dict[str, str] = {}
        """Server → the protocol version its last listing was answered in."""
        self._lister: Lister = lister or (lambda spec: discover(spec, token_for=token_for))
        self.first_attempt = asyncio.Event()
        """Set once every server has been tried once (listed or found unreachable)."""
        self._retrying: asyncio.Future[Any] | None = None
        self._retry_began = 0.0
        self._clock = clock
        for spec in toolsets.servers:
            self._mark_unreachable(spec, "not listed yet")

    @property
    def servers(self) -> tuple[HttpServer | StdioServer, ...]:
        return self.toolsets.servers

    def _mark_unreachable(self, spec: HttpServer | StdioServer, reason: str) -> None:
        self.unreachable[spec.name] = reason
        for tool in spec.tools:
            self.withdrawn.setdefault(
                tool,
                Withdrawal(
                    SERVER_UNREACHABLE_RULE,
                    StopReason.TOOL_SERVER_UNREACHABLE,
                    f"tool {tool!r} is served by {spec.name!r}, which cannot be listed: {reason}",
                ),
            )

    async def refresh(self) -> None:
        """List every server once: the first time it answers its tools are offered, later its pins are
        compared. A server that fails stays (or becomes) unreachable; nothing raises."""
        await asyncio.gather(*(self._refresh(spec) for spec in self.toolsets.servers))
        self.first_attempt.set()

    async def _refresh(self, spec: HttpServer | StdioServer) -> None:
        try:
            listing = await self._lister(spec)
        except ServerUnreachable as exc:
            if spec.name in self._pins:
                log.warning("toolset server %s cannot be re-listed: %s", spec.name, exc.reason)
            else:
                self._mark_unreachable(spec, exc.reason)
                log.warning("toolset server %s is unreachable: %s", spec.name, exc.reason)
            return
        self._eras[spec.name] = listing.protocol_version
        if spec.name not in self._pins:
            self._adopt(spec, listing)
        else:
            self._compare(spec, listing)

    def _adopt(self, spec: HttpServer | StdioServer, listing: ServerListing) -> None:
        try:
            contracts = contracts_of(spec, listing)
        except ToolsetMismatch as exc:  # fixed only by the operator: reported as unreachable, never offered
            self._mark_unreachable(spec, f"its listing does not fit its declaration: {exc}")
            log.error("toolset server %s: %s", spec.name, exc)
            return
        self.contracts.update(contracts)
        self._pins[spec.name] = pins_of(listing, frozenset(spec.tools))
        self.pins.update(self._pins[spec.name])
        self.unreachable.pop(spec.name, None)
        for tool in spec.tools:
            self.withdrawn.pop(tool, None)
        log.info(
            "toolset server %s listed in %s: %d tools offered",
            spec.name,
            listing.protocol_version,
            len(contracts),
        )

    def _compare(self, spec: HttpServer | StdioServer, listing: ServerListing) -> None:
        changes = compare(self._pins[spec.name], listing, frozenset(spec.tools))
        self.changes[spec.name] = changes
        for tool in sorted(changes.broken):
            if tool not in self.withdrawn:
                log.error("toolset server %s changed tool %s since it was pinned", spec.name, tool)
            self.withdrawn[tool] = Withdrawal(
                DEFINITION_CHANGED_RULE,
                StopReason.TOOL_DEFINITION_CHANGED,
                f"server {spec.name!r} now lists a definition of {tool!r} other than the one pinned "
                f"({changes.describe()})",
            )

    async def retry_unlisted(self, within_s: float | None = None) -> None:
        """Try the servers never listed yet once more, now rather than at their next backoff (a run is
        asking for them); concurrent callers share one attempt, and a caller that stops waiting leaves it
        running. With ``within_s``, a caller waits only until the attempt is that old: a server that came up
        answers in milliseconds, and one that has not answered by then is not worth every later caller's wait
        (a server whose only node is gone holds an attempt for its whole connect timeout)."""
        if self._retrying is None or self._retrying.done():
            unlisted = [spec for spec in self.toolsets.servers if spec.name not in self._pins]
            self._retrying = asyncio.ensure_future(
                asyncio.gather(*(self._refresh(spec) for spec in unlisted))
            )
            self._retry_began = self._clock()
        if within_s is None:
            await asyncio.shield(self._retrying)
            return
        left = self._retry_began + within_s - self._clock()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._retrying), left)

    async def keep_listed(self, relist_every_s: float = RELIST_EVERY_S) -> None:
        """Forever: retry unreachable servers with backoff, and re-list every server every ``relist_every_s``."""
        delay = RETRY_FIRST_S
        since_relist = 0.0
        while True:
            if not self.first_attempt.is_set():
                await self.refresh()
            if self.unreachable:
                await asyncio.sleep(delay)
                since_relist += delay
                delay = min(delay * 2, RETRY_MAX_S)
                await asyncio.gather(
                    *(self._refresh(spec) for spec in self.toolsets.servers if spec.name in self.unreachable)
                )
                if since_relist < relist_every_s:
                    continue
            else:
                delay = RETRY_FIRST_S
                await asyncio.sleep(max(0.0, relist_every_s - since_relist))
            since_relist = 0.0
            await asyncio.gather(
                *(self._refresh(spec) for spec in self.toolsets.servers if spec.name in self._pins)
            )

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` shows: ``ready`` unless a server is unreachable; each server's state in words, and
        the protocol version a listed one speaks."""
        servers: dict[str, Any] = {}
        for spec in self.toolsets.servers:
            if spec.name in self.unreachable:
                servers[spec.name] = {"ok": False, "error": f"unreachable: {self.unreachable[spec.name]}"}
                continue
            changes = self.changes.get(spec.name)
            entry: dict[str, Any] = {"ok": True, "protocol": self._eras[spec.name]}
            if changes is not None and not changes.unchanged:
                entry["changed"] = changes.describe()
                entry["withdrawn"] = sorted(changes.broken)
            servers[spec.name] = entry
        return {"ready": not self.unreachable, "servers": servers}

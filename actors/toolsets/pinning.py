"""Tool-definition pins: a digest per tool of what its server listed, and what changed since.

A digest is the SHA-256 of the canonical JSON (sorted keys, no whitespace, UTF-8) of the definition's name,
title, description, input and output schemas and annotations. The runtime records a run's pins when it
starts, re-lists the servers later (``relist``) and denies the tools whose digest changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from actors.toolsets.listing import ServerListing, ToolDefinition
from dag.fingerprint import sha256_hex

ToolPins = Mapping[str, str]
"""Tool name → definition digest (``sha256:<hex>``)."""


def definition_digest(tool: ToolDefinition) -> str:
    """The stable digest of one tool's definition."""
    return "sha256:" + sha256_hex(tool.definition)


RUN_PIN_HEX = 16
"""How much of a definition's digest a run records per tool (64 bits: a server would need a second preimage
to list another definition under a run's pin; a run's first event stays small)."""


def run_pin(digest: str) -> str:
    """The part of a definition digest (``sha256:…``) a run records."""
    return digest.removeprefix("sha256:")[:RUN_PIN_HEX]


def pins_of(listing: ServerListing, tools: frozenset[str] | None = None) -> dict[str, str]:
    """Digests of the listed tools (only those named in ``tools``, if given)."""
    return {
        tool.name: definition_digest(tool) for tool in listing.tools if tools is None or tool.name in tools
    }


@dataclass(frozen=True)
class PinChanges:
    """How a server's listing differs from pins: tools added, removed, or listed with another digest."""

    server: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed)

    @property
    def broken(self) -> frozenset[str]:
        """Pinned tools a run may no longer use: removed or changed (an added tool breaks no pin)."""
        return frozenset(self.removed) | frozenset(self.changed)

    def describe(self) -> str:
        """One line for ``/readyz`` and logs: which tools of which server changed how."""
        if self.unchanged:
            return f"{self.server}: unchanged"
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (("changed", self.changed), ("removed", self.removed), ("added", self.added))
            if names
        ]
        return f"{self.server}: {'; '.join(parts)}"


def compare(pins: ToolPins, listing: ServerListing, tools: frozenset[str] | None = None) -> PinChanges:
    """What ``listing`` changed against ``pins``; ``tools`` limits the comparison to the tools offered
    (a tool the overlay does not name is never offered, so its changes do not matter)."""
    now = pins_of(listing, tools)
    return PinChanges(
        server=listing.server,
        added=tuple(sorted(set(now) - set(pins))),
        removed=tuple(sorted(set(pins) - set(now))),
        changed=tuple(sorted(name for name in set(now) & set(pins) if now[name] != pins[name])),
    )

"""Action fingerprints: identical actions hash identically, whatever the key order."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no insignificant whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def action_fingerprint(tool: str, args: Any) -> str:
    """SHA-256 of the canonical JSON of ``{tool, resolved args}``."""
    return sha256_hex({"tool": tool, "args": args})

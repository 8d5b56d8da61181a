"""What a request body must be before anything parses or stores it: shallow enough, finite, storable text."""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterator
from itertools import accumulate

# A string, closed or not: the optional closing quote keeps the scan linear on an unterminated one.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_STEPS = bytes.maketrans(b"[{]}", bytes([1, 1, 255, 255]))  # +1 to open, -1 (signed) to close


def nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests deeper than ``limit``, read without parsing it (and so without
    recursion). Brackets inside strings do not count; text that is not JSON is for the parser to reject."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    steps = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS).translate(_STEPS)
    return max(accumulate(array("b", steps)), default=0) > limit


def unfit_values(value: object, pointer: str = "") -> Iterator[tuple[str, str]]:
    """``(json pointer, reason)`` for each number that is not finite and each string (or key) PostgreSQL
    cannot store: one holding NUL, or a lone surrogate that has no UTF-8 encoding.

    Recursive: call it only on a value whose depth ``nests_deeper_than`` has bounded.
    """
    match value:
        case float() if not math.isfinite(value):
            yield pointer, "numbers must be finite (no NaN, Infinity or overflowing literals)"
        case str():
            reason = _unstorable(value)
            if reason is not None:
                yield pointer, reason
        case dict():
            for key, child in value.items():
                child_pointer = f"{pointer}/{_escape(str(key))}"
                reason = _unstorable(str(key))
                if reason is not None:
                    yield child_pointer, f"this key: {reason}"
                yield from unfit_values(child, child_pointer)
        case list():
            for index, child in enumerate(value):
                yield from unfit_values(child, f"{pointer}/{index}")
        case _:
            pass


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "text must not contain NUL (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "text must be valid Unicode (a lone surrogate is not)"
    return None


def _escape(key: str) -> str:
    """A key as a JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")

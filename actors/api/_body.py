"""How deep a request body nests, read before anything parses it (what it may hold: `dag.storable`)."""

from __future__ import annotations

import re
from array import array
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

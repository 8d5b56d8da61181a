"""Values a run can record: JSON whose every string PostgreSQL can store, whose every number is finite, and
that nests no deeper than ``MAX_DEPTH``.

JSON allows ``"\\u0000"`` and unpaired surrogate escapes, and Python's parser reads ``NaN`` and ``Infinity``;
none of them can be stored (``jsonb`` refuses NUL, UTF-8 has no encoding for a lone surrogate, JSON has no
such numbers). JSON sets no limit on nesting, but everything that reads a run back does (below). Values that
come from outside — a request body, a tool's output — are checked here before anything records them; a
diagnostic a tool wrote is made storable instead (``storable_text``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from dag.refs import pointer_token

MAX_DEPTH = 128
"""How many arrays and objects a value may nest. Far more than a document a tool means to return needs, and
well inside what reads it back: pydantic serialises 255 levels (an output in a run's view sits five deeper),
Python's ``json`` about 1,000 recursive frames."""

_REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def unfit_values(value: object) -> Iterator[tuple[str, str]]:
    """``(json pointer, reason)`` for each number that is not finite, each string (or key) that cannot be
    stored and each array or object nested deeper than ``MAX_DEPTH`` (what it holds is not looked at), in
    document order. Iterative: a value of any depth is walked without recursion."""
    pending: list[tuple[str, object, str | None, int]] = [("", value, None, 0)]
    while pending:
        pointer, item, key_problem, depth = pending.pop()
        if key_problem is not None:
            yield pointer, f"this key: {key_problem}"
        if isinstance(item, dict | list):
            depth += 1
            if depth > MAX_DEPTH:
                yield pointer, f"values must not nest deeper than {MAX_DEPTH} arrays and objects"
                continue
        match item:
            case float() if not math.isfinite(item):
                yield pointer, "numbers must be finite (no NaN, Infinity or overflowing literals)"
            case str():
                problem = _unstorable(item)
                if problem is not None:
                    yield pointer, problem
            case dict():
                children = [
                    (f"{pointer}/{pointer_token(str(key))}", child, _unstorable(str(key)), depth)
                    for key, child in item.items()
                ]
                pending.extend(reversed(children))
            case list():
                pending.extend(
                    (f"{pointer}/{index}", child, None, depth)
                    for index, child in reversed(list(enumerate(item)))
                )
            case _:
                pass


def nests_deeper_than(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` holds an array or object more than ``limit`` levels deep (``value`` itself is the
    first). Iterative, and only containers are visited: cheaper than ``unfit_values`` for a value already
    known to hold nothing else unfit, such as arguments whose parts were each checked on their own."""
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth == limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD: for messages, whose exact bytes matter less
    than recording them."""
    if "\x00" in text:
        text = text.replace("\x00", _REPLACEMENT)
    if not text.isascii():
        text = _SURROGATE.sub(_REPLACEMENT, text)
    return text


def _unstorable(text: str) -> str | None:
    if "\x00" in text:
        return "text must not contain NUL (\\u0000)"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return "text must be valid Unicode (a lone surrogate is not)"
    return None

"""Listings a page at a time: the opaque cursor a page ends with, the bound on a page's size, and the filters
``GET /runs`` and ``GET /decisions`` share (the run's resource, its creation time).

A cursor is where the last page ended (``actors.store.listing``'s keyset), as base64url JSON tagged with its
listing: a client passes it back unread. One that is not a cursor of that listing is a 422, never a 5xx.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Query
from pydantic import AfterValidator, AwareDatetime, StringConstraints

from actors.api._problem import Problem
from actors.store.listing import PendingKey, RunKey
from dag.run_resource import (
    IDENTIFIER_PATTERN,
    MAX_RESOURCE_KEY_LENGTH,
    MAX_RESOURCE_KEYS,
    MAX_RESOURCE_VALUE_LENGTH,
)

MAX_PAGE = 200
DEFAULT_PAGE = 50

Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"At most this many items (1–{MAX_PAGE}).")]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=512,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="The `next` of the page before: this page starts after it.",
    ),
]

_PAIR = (
    rf"^[A-Za-z_][A-Za-z0-9_.-]{{0,{MAX_RESOURCE_KEY_LENGTH - 1}}}:[^\x00]{{1,{MAX_RESOURCE_VALUE_LENGTH}}}$"
)
ResourcePairs = Annotated[
    list[Annotated[str, StringConstraints(pattern=_PAIR)]],
    Query(
        alias="resource",
        max_length=MAX_RESOURCE_KEYS,
        description="`KEY:VALUE`, repeatable: only runs whose resource holds each pair "
        "(`resource=root:/srv/reports`).",
    ),
]
CaseId = Annotated[
    str | None,
    Query(
        pattern=IDENTIFIER_PATTERN, description="The caseops shorthand: `case_id=C` is `resource=case_id:C`."
    ),
]


def _in_utc(moment: datetime) -> datetime:
    """``moment`` in UTC: a moment a few hours from the ends of the calendar has no UTC form (a 422)."""
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise ValueError("the moment is out of range once in UTC") from None


Moment = Annotated[AwareDatetime, AfterValidator(_in_utc)]
CreatedAfter = Annotated[
    Moment | None, Query(description="Only runs created at or after this moment (ISO 8601, with its offset).")
]
CreatedBefore = Annotated[Moment | None, Query(description="Only runs created before this moment.")]


def resource_filter(pairs: list[str], case_id: str | None) -> dict[str, str]:
    """The resource a run must hold every pair of: ``pairs`` (``KEY:VALUE``) and the ``case_id`` shorthand;
    one key given two values is a 422 (no run holds both)."""
    named = [pair.split(":", 1) for pair in pairs] + ([["case_id", case_id]] if case_id is not None else [])
    resource: dict[str, str] = {}
    for key, value in named:
        if resource.setdefault(key, value) != value:
            raise _invalid("/query/resource", f"the resource key {key!r} is given two values")
    return resource


def run_cursor(key: RunKey) -> str:
    return _encode(["runs", key.created_at.isoformat(), key.run_id])


def run_key(cursor: str | None) -> RunKey | None:
    """Where the page a ``GET /runs`` cursor names starts."""
    if cursor is None:
        return None
    match _decode(cursor):
        case ["runs", str(created_at), str(run_id)]:
            try:
                return RunKey(_moment(created_at), str(uuid.UUID(run_id)))
            except ValueError:
                pass
    raise _not_a_cursor()


_PENDING_KEY = re.compile(r"^[oqr]:[0-9a-f:-]{1,200}$")


def pending_cursor(key: PendingKey) -> str:
    return _encode(["decisions", key.deadline.isoformat() if key.deadline else None, key.key])


def pending_key(cursor: str | None) -> PendingKey | None:
    """Where the page a ``GET /decisions`` cursor names starts."""
    if cursor is None:
        return None
    match _decode(cursor):
        case ["decisions", str() | None as deadline, str(key)] if _PENDING_KEY.match(key):
            try:
                return PendingKey(_moment(deadline) if deadline is not None else None, key)
            except ValueError:
                pass
    raise _not_a_cursor()


def _moment(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError("a cursor's moment has its offset")
    return _in_utc(moment)


def _encode(position: list[Any]) -> str:
    text = json.dumps(position, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def _decode(cursor: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None


def _not_a_cursor() -> Problem:
    return _invalid("/query/cursor", "not a cursor of this listing: pass back a page's `next` as it is")


def _invalid(location: str, message: str) -> Problem:
    return Problem(
        422,
        "invalid-request",
        "the request does not have the expected shape",
        errors=[{"location": location, "message": message}],
    )

"""Pure rules of the caseops domain: label normalization, rule-version order, timestamps with offsets."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Protocol, TypeVar


def normalize_label(label: str) -> str:
    """Labels compare after Unicode NFKC normalization and trimming."""
    return unicodedata.normalize("NFKC", label).strip()


def rule_version_key(version: str) -> tuple[int, ...]:
    """Rule versions compare numerically segment by segment: ``2026.10`` is newer than ``2026.9``."""
    return tuple(int(segment) for segment in version.split("."))


class AliasRule(Protocol):
    @property
    def rule_version(self) -> str: ...
    @property
    def confidence(self) -> float: ...


_Rule = TypeVar("_Rule", bound=AliasRule)


def newest_rule(rules: Iterable[_Rule]) -> _Rule | None:
    """The rule that wins: the newest version, then the highest confidence."""
    return max(rules, key=lambda rule: (rule_version_key(rule.rule_version), rule.confidence), default=None)


def offset_minutes(moment: datetime) -> int:
    """The UTC offset ``moment`` was written with, in minutes; naive timestamps are refused."""
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"timestamp {moment.isoformat()} has no UTC offset")
    return int(offset.total_seconds() // 60)


def with_offset(moment: datetime, minutes: int) -> datetime:
    """``moment`` shown in the offset it was originally written with."""
    return moment.astimezone(timezone(timedelta(minutes=minutes)))

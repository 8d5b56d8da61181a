"""The pure caseops rules: label normalization, rule-version order, timestamps that keep their offset."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from mcp_server.domain import newest_rule, normalize_label, offset_minutes, rule_version_key, with_offset


@dataclass(frozen=True)
class Rule:
    canonical_code: str
    rule_version: str
    confidence: float


@pytest.mark.parametrize(
    ("label", "normalized"),
    [
        ("ＩＤカード", "IDカード"),  # full-width Latin letters become ASCII
        ("ＡＢＣ１２３", "ABC123"),
        ("\u3000道路交通事故認定書 ", "道路交通事故認定書"),  # ideographic space and a trailing space trimmed
        ("\u3000\u3000身分証明書\u3000", "身分証明書"),
        ("Statement of loss", "Statement of loss"),
    ],
)
def test_normalize_label_applies_nfkc_and_trims(label: str, normalized: str) -> None:
    assert normalize_label(label) == normalized


def test_labels_that_differ_only_in_width_and_padding_normalize_equal() -> None:
    assert normalize_label("\u3000道路交通事故認定書 ") == normalize_label("道路交通事故認定書")
    assert normalize_label("ＩＤカード") == normalize_label("IDカード")


def test_rule_versions_compare_numerically_segment_by_segment() -> None:
    assert rule_version_key("2026.10") > rule_version_key("2026.9")
    assert rule_version_key("2027.1") > rule_version_key("2026.12")
    assert rule_version_key("2026.1") == rule_version_key("2026.1")
    assert rule_version_key("2026.1") == (2026, 1)


def test_newest_rule_prefers_the_newer_version_over_a_higher_confidence() -> None:
    older_but_surer = Rule("ACCIDENT_CERTIFICATE", "2026.9", 0.99)
    newer = Rule("POLICE_REPORT", "2026.10", 0.51)
    assert newest_rule([older_but_surer, newer]) is newer
    assert newest_rule([newer, older_but_surer]) is newer


def test_newest_rule_breaks_a_version_tie_by_confidence() -> None:
    unsure = Rule("POLICE_REPORT", "2026.2", 0.6)
    sure = Rule("ACCIDENT_CERTIFICATE", "2026.2", 0.95)
    assert newest_rule([unsure, sure]) is sure
    assert newest_rule([sure, unsure]) is sure


def test_newest_rule_accepts_a_generator_as_the_repository_passes_one() -> None:
    rules = [Rule("A", "2026.1", 0.5), Rule("B", "2026.3", 0.5), Rule("C", "2026.2", 0.9)]
    winner = newest_rule(rule for rule in rules)
    assert winner is not None
    assert winner.canonical_code == "B"


def test_newest_rule_of_no_rules_is_none() -> None:
    assert newest_rule([]) is None
    assert newest_rule(rule for rule in ()) is None


@pytest.mark.parametrize(
    ("written", "minutes"),
    [
        ("2026-07-18T09:30:00+08:00", 480),
        ("2026-07-02T14:05:00+09:00", 540),
        ("2026-08-03T12:00:00+01:00", 60),
        ("2026-08-03T12:00:00+00:00", 0),
        ("2026-08-03T12:00:00-05:30", -330),
    ],
)
def test_offset_minutes_reads_the_offset_a_timestamp_was_written_with(written: str, minutes: int) -> None:
    assert offset_minutes(datetime.fromisoformat(written)) == minutes


def test_offset_minutes_refuses_a_naive_timestamp() -> None:
    with pytest.raises(ValueError, match="no UTC offset"):
        offset_minutes(datetime(2026, 7, 18, 9, 30))


@pytest.mark.parametrize(
    "written", ["2026-07-18T09:30:00+08:00", "2026-09-01T10:15:00-03:00", "2026-02-28T23:59:59+00:00"]
)
def test_with_offset_restores_the_written_form_after_storage_in_utc(written: str) -> None:
    original = datetime.fromisoformat(written)
    stored = original.astimezone(UTC)  # what the database hands back
    shown = with_offset(stored, offset_minutes(original))
    assert shown.isoformat() == written
    assert shown == original


def test_with_offset_keeps_plus_eight_hours_and_the_same_instant() -> None:
    stored = datetime(2026, 7, 18, 1, 30, tzinfo=UTC)
    shown = with_offset(stored, 480)
    assert shown.isoformat() == "2026-07-18T09:30:00+08:00"
    assert shown == stored

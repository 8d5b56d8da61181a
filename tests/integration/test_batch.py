"""``raydag batch``, run as a user would run it: in its own process, against the session database."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.test_cli import environment, home_fixture, raydag

WIDE = "200"  # COLUMNS for the subprocess: one table row per line


home = home_fixture("batch")


def table_row(output: str, case_id: str) -> list[str]:
    """The cells of the summary table's row for ``case_id``."""
    for line in output.splitlines():
        cells = [cell.strip() for cell in re.split("[│┃]", line.strip().strip("│┃"))]
        if cells and cells[0] == case_id:
            return cells
    raise AssertionError(f"no table row for {case_id} in:\n{output}")


def test_batch_runs_the_cases_concurrently_reports_each_and_exits_1_for_an_unknown_case(
    dsn: str, home: Path
) -> None:
    cases = home / "cases.txt"
    cases.write_text("# the demo tenant's cases\nC-101\n\nC-102\n   C-104  \n# not a case of anyone\nC-999\n")

    done = raydag("batch", str(cases), env=environment(home, RAYDAG_DATABASE_URL=dsn, COLUMNS=WIDE))

    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((home / "batch-report.json").read_text())
    by_case = {entry["case_id"]: entry for entry in report["cases"]}
    assert [entry["case_id"] for entry in report["cases"]] == ["C-101", "C-102", "C-104", "C-999"]
    assert {case: (entry["status"], entry["outcome"]) for case, entry in by_case.items()} == {
        "C-101": ("completed", "DOCUMENTS_COMPLETE"),
        "C-102": ("completed", "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"),
        "C-104": ("completed", "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION"),
        "C-999": ("not_found", None),
    }
    runs = [by_case[case] for case in ("C-101", "C-102", "C-104")]
    assert all(re.fullmatch(r"[0-9a-f-]{36}", run["run_id"]) for run in runs)
    assert len({run["run_id"] for run in runs}) == 3
    assert all(run["stop_reason"] is None and run["seconds"] > 0 for run in runs)
    assert by_case["C-999"]["run_id"] is None
    assert "was not found for tenant 'tenant-demo'" in by_case["C-999"]["detail"]
    assert report["totals"]["cases"] == 4
    assert report["totals"]["by_status"] == {"completed": 3, "not_found": 1}
    # Concurrent: every run had started before any of them finished.
    assert max(run["created_at"] for run in runs) < min(run["finished_at"] for run in runs)

    assert table_row(done.stdout, "case") == ["case", "status", "outcome / stop reason", "seconds"]
    assert table_row(done.stdout, "C-104")[:3] == [
        "C-104",
        "completed",
        "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION",
    ]
    assert table_row(done.stdout, "C-999")[1] == "not_found"
    assert float(table_row(done.stdout, "C-101")[3]) == pytest.approx(by_case["C-101"]["seconds"], abs=0.01)
    assert "4/4" in done.stderr, "the progress bar ends at 4/4 cases"


def test_batch_of_a_json_list_one_at_a_time_exits_3_when_a_case_needs_a_human(dsn: str, home: Path) -> None:
    cases = home / "cases.json"
    cases.write_text(json.dumps(["C-105", "C-101"]))
    report_path = home / "out" / "report.json"
    report_path.parent.mkdir()

    done = raydag(
        "batch",
        str(cases),
        "--concurrency",
        "1",
        "--report",
        str(report_path),
        env=environment(home, RAYDAG_DATABASE_URL=dsn, COLUMNS=WIDE),
    )

    assert done.returncode == 3, done.stdout + done.stderr
    assert not (home / "batch-report.json").exists()
    report = json.loads(report_path.read_text())
    first, second = report["cases"]
    assert (first["case_id"], first["status"], first["stop_reason"]) == (
        "C-105",
        "needs_human",
        "UNRESOLVED_SOURCE_DOCUMENTS",
    )
    assert (second["case_id"], second["status"]) == ("C-101", "completed")
    assert first["finished_at"] <= second["created_at"], "--concurrency 1 runs one case at a time"
    assert table_row(done.stdout, "C-105")[2].startswith("UNRESOLVED_SOURCE_DOCUMENTS")


@pytest.mark.parametrize(
    ("name", "content", "names"),
    [
        ("lines.txt", "C-101\n# comment\nC 102\n", "line 3"),
        ("list.json", '["C-101", 42]', "element 2 of the list"),
        ("list.json", '["C-101", "../etc"]', "element 2 of the list"),
        ("broken.json", '["C-101",\n  "C-102"', "line 2, column 10"),
        ("twice.txt", "C-101\nC-102\nC-101\n", "line 3: C-101 is listed twice (first at line 1)"),
        ("empty.txt", "\n# nothing\n", "no case ids"),
    ],
    ids=["bad-line", "not-a-string", "bad-element", "invalid-json", "listed-twice", "empty"],
)
def test_batch_of_a_malformed_file_names_the_line_or_element_and_exits_2(
    home: Path, name: str, content: str, names: str
) -> None:
    cases = home / name
    cases.write_text(content)

    done = raydag("batch", str(cases), env=environment(home, COLUMNS=WIDE), timeout=60)

    assert done.returncode == 2, done.stdout + done.stderr
    assert "invalid batch file" in done.stderr
    assert names in done.stderr
    assert not (home / "batch-report.json").exists()


def test_error_lines_are_never_wrapped_or_cut_however_long_the_path(home: Path) -> None:
    """stderr is not a terminal: every message stays one line, at any width (here COLUMNS=40)."""
    deep = home / ("a-directory-with-a-long-name-" * 4) / ("and-another-one-" * 5)
    deep.mkdir(parents=True)
    cases = deep / "twice.txt"
    cases.write_text("C-101\nC-102\nC-101\n")
    missing = deep / "missing.txt"
    env = environment(home, COLUMNS="40")

    malformed = raydag("batch", str(cases), env=env, timeout=60)
    absent = raydag("batch", str(missing), env=env, timeout=60)

    assert malformed.returncode == 2
    expected = f"invalid batch file: {cases}: line 3: C-101 is listed twice (first at line 1)"
    assert expected in malformed.stderr.splitlines(), malformed.stderr
    assert absent.returncode == 2
    assert any(str(missing) in line and "does not exist" in line for line in absent.stderr.splitlines()), (
        absent.stderr
    )

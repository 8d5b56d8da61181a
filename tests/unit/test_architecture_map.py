"""docs/ARCHITECTURE.md's map of ``actors/`` names every module there is, and no module that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

ACTORS = REPO / "actors"
ROW = re.compile(r"^\| `actors/([a-z_]+)/` \| [^|]+ \| (?P<modules>[^\n]+) \|$", re.MULTILINE)


def map_rows() -> dict[str, str]:
    text = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    return {match.group(1): match.group("modules") for match in ROW.finditer(text)}


def top_level(column: str) -> str:
    """The column with every parenthesized gloss taken out: what is left names the modules themselves."""
    while True:
        shorter = re.sub(r"\([^()]*\)", "", column)
        if shorter == column:
            return column
        column = shorter


def modules_of(package: Path) -> set[str]:
    """A package's modules (``name``) and sub-packages (``name/``), private ones included."""
    found = {path.stem for path in package.glob("*.py") if path.name != "__init__.py"}
    found |= {f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").exists()}
    found |= {f"{path.name}/" for path in package.iterdir() if path.name == "migrations"}
    return found


PACKAGES = sorted(path.name for path in ACTORS.iterdir() if (path / "__init__.py").exists())


def test_every_package_of_actors_has_a_row() -> None:
    assert sorted(map_rows()) == PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_the_row_names_each_module_of_its_package_and_no_other(package: str) -> None:
    column = map_rows()[package]
    named = set(re.findall(r"`([a-z_]+/?)`", top_level(column)))

    assert named == modules_of(ACTORS / package)


@pytest.mark.parametrize(
    "package",
    sorted(str(path.relative_to(ACTORS)) for path in ACTORS.glob("*/*") if (path / "__init__.py").exists()),
)
def test_a_packages_own_sub_package_has_each_of_its_modules_named_in_the_row(package: str) -> None:
    outer, _ = package.split("/")
    column = map_rows()[outer]
    mentioned = set(re.findall(r"`([a-z_]+)`", column))

    assert {name for name in modules_of(ACTORS / package) if not name.endswith("/")} <= mentioned


DOCUMENTS = sorted(
    [REPO / "README.md", *(path for path in (REPO / "docs").glob("*.md") if path.name != "BENCHMARKS.md")]
)
"""The documents that describe the code as it is (BENCHMARKS.md is a dated record: its paths are of their date)."""


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_source_file_a_document_names_exists(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    named = set(
        re.findall(
            r"`((?:actors|dag|planner|mcp_server|bench|tests)/[A-Za-z0-9_/.-]+\.(?:py|sql|yaml|html|js))`",
            text,
        )
    )

    assert sorted(path for path in named if not (REPO / path).exists()) == []


def test_the_unit_tests_of_actors_mirror_its_packages() -> None:
    """``tests/unit/actors/<package>/`` holds the unit tests of ``actors/<package>/``, and nothing else does."""
    tests = REPO / "tests" / "unit" / "actors"
    loose = sorted(path.name for path in tests.glob("*.py"))
    folders = {
        str(path.relative_to(tests))
        for path in tests.rglob("*")
        if path.is_dir() and path.name != "__pycache__"
    }

    assert loose == []
    assert sorted(folder for folder in folders if not (ACTORS / folder).is_dir()) == []

"""Every relative link in the README and docs/ leads somewhere: to a file of the repository, and to a heading
that exists when it names one (``#anchor``, as GitHub makes anchors from headings)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose_lines(text: str) -> list[str]:
    """The document's lines outside fenced code blocks."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = _CODE_SPAN.sub(lambda found: found.group(2), heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a document's headings make; a repeated heading's get ``-1``, ``-2``, … as on GitHub."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in prose_lines(text):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading.group(2))
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(text: str) -> list[str]:
    """The targets of a document's Markdown links, outside code blocks and code spans."""
    targets: list[str] = []
    for line in prose_lines(text):
        targets += _LINK.findall(_CODE_SPAN.sub("code", line))
    return targets


def broken_links(document: Path, text: str) -> list[str]:
    """Each relative link of ``document`` whose file does not exist, or whose anchor no heading makes."""
    broken: list[str] = []
    for target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: — not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        if not path:  # a heading of this document
            if anchor not in anchors(text):
                broken.append(f"{target}: no heading makes #{anchor}")
            continue
        resolved = (document.parent / path).resolve()
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            broken.append(f"{target}: no such file")
        elif (
            anchor
            and resolved.suffix == ".md"
            and anchor not in anchors(resolved.read_text(encoding="utf-8"))
        ):
            broken.append(f"{target}: no heading makes #{anchor}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda document: document.name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(document: Path) -> None:
    assert broken_links(document, document.read_text(encoding="utf-8")) == []


def test_the_check_reports_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    document = REPO / "docs" / "EXAMPLE.md"  # never written: only its folder matters
    text = (
        "# Example\n\n## A section\n\n"
        "[fine](#a-section) [fine too](API.md#stop-reasons) [web](https://example.com/x.md)\n"
        "[gone](NO-SUCH-FILE.md) [moved](API.md#no-such-heading) [here](#nowhere)\n"
        "```\n[in a code block](ALSO-MISSING.md)\n```\n"
        "`[in a code span](MISSING-TOO.md)`\n"
    )

    assert broken_links(document, text) == [
        "NO-SUCH-FILE.md: no such file",
        "API.md#no-such-heading: no heading makes #no-such-heading",
        "#nowhere: no heading makes #nowhere",
    ]


def test_anchors_are_made_as_github_makes_them() -> None:
    text = (
        "# `POST /runs`\n## Load through Serve (`python -m bench load`, ~11 min)\n"
        "## The run's resource\n## Notes\n## Notes\n"
    )

    assert anchors(text) == {
        "post-runs",
        "load-through-serve-python--m-bench-load-11-min",
        "the-runs-resource",
        "notes",
        "notes-1",
    }


def test_the_readme_links_every_document_in_docs() -> None:
    readme = REPO / "README.md"
    linked = {
        (readme.parent / target.partition("#")[0]).resolve()
        for target in links(readme.read_text(encoding="utf-8"))
        if not target.startswith("#")
    }

    unlinked = sorted(path.name for path in DOCUMENTS[1:] if path.resolve() not in linked)
    assert unlinked == []

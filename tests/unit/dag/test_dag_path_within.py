"""``path_within``: a path is sent to the server as written, so only text already in normal form, whose every
reading a server may take stays under the root, is admitted (issue 26, item 8)."""

from __future__ import annotations

import posixpath
import unicodedata
from urllib.parse import unquote

import pytest
from dag_run_builders import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from dag.contracts import BindingMatch, RunBinding, path_refusal

ROOT = "/srv/root"
BINDING = RunBinding("path", "root", BindingMatch.PATH_WITHIN)


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("/srv/root", id="the-root-itself"),
        pytest.param("/srv/root/a/b.txt", id="a-file-below"),
        pytest.param("/srv/root/a%20b", id="percent-encoded-space-decodes-within"),
        pytest.param("/srv/root/ünïcode.txt", id="composed-letters-nfkc-stable"),
        pytest.param("/srv/root/a/%2e%2e", id="decoded-dot-dot-stays-within"),
        pytest.param("/srv/root/a\\b", id="backslash-read-as-slash-stays-within"),
        pytest.param("/srv/root/100%", id="a-lone-percent-sign"),
    ],
)
def test_a_normal_path_whose_every_reading_stays_under_the_root_is_admitted(path: str) -> None:
    assert BINDING.refusal(path, ROOT) is None
    assert BINDING.admits(path, ROOT)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        pytest.param("/srv/root/../../srv/root/x", "normal form", id="issue-dot-dot-folding-back-inside"),
        pytest.param("/srv/root/%2e%2e/etc", "when read percent-decoded", id="issue-percent-encoded-dots"),
        pytest.param("/srv/root/\u2024\u2024/etc", "NFKC", id="issue-one-dot-leader"),
        pytest.param("/srv/root/../etc", "normal form", id="dot-dot"),
        pytest.param("/srv/root/./a", "normal form", id="dot"),
        pytest.param("/srv/root//a", "normal form", id="empty-segment"),
        pytest.param("//srv/root/a", "normal form", id="leading-double-slash-normpath-keeps"),
        pytest.param("/srv/root/", "normal form", id="trailing-slash"),
        pytest.param("/srv/root/%2E%2E/etc", "when read percent-decoded", id="upper-case-percent-dots"),
        pytest.param("/srv/root/%252e%252e/etc", "when read percent-decoded", id="double-encoded-dots"),
        pytest.param("/srv/root/..%2fetc", "when read percent-decoded", id="encoded-slash-after-dot-dot"),
        pytest.param("/srv/root/..%5c..%5cetc", "percent-decoded with", id="encoded-backslashes"),
        pytest.param("/srv/root/..\\..\\etc", "when read with", id="backslash-traversal"),
        pytest.param("/srv/root/%E2%80%A4%E2%80%A4/etc", "NFKC-normalized", id="encoded-one-dot-leaders"),
        pytest.param("/srv/root/\uff0e\uff0e/etc", "NFKC", id="fullwidth-full-stops"),
        pytest.param("/srv/root/..\uff0fetc", "NFKC", id="fullwidth-solidus"),
        pytest.param("/srv/root/u\u0308.txt", "NFKC", id="decomposed-letter"),
        pytest.param("/srv/root/a\x00.txt", "NUL", id="nul"),
        pytest.param("/srv/root/..%00/x", "when read percent-decoded", id="encoded-nul"),
        pytest.param("/srv/root/%C0%AE%C0%AE/etc", "UTF-8", id="overlong-utf8-dots"),
        pytest.param("/srv/root/%" + "25" * 8 + "2e", "UTF-8 text within", id="too-deeply-encoded"),
        pytest.param("/srv/rootx", "not within the run's root", id="a-sibling-sharing-the-prefix"),
        pytest.param("/etc/passwd", "not within the run's root", id="elsewhere"),
        pytest.param("srv/root/a", "not an absolute path", id="relative"),
        pytest.param("C:\\srv\\root", "not an absolute path", id="windows-drive"),
    ],
)
def test_a_path_that_is_not_normal_or_that_some_reading_takes_outside_the_root_is_refused(
    path: str, reason: str
) -> None:
    refusal = BINDING.refusal(path, ROOT)

    assert refusal is not None
    assert reason in refusal
    assert not BINDING.admits(path, ROOT)


@pytest.mark.parametrize(
    ("path", "reading"),
    [
        ("/srv/root/a%2fb\\..\\..", "with '\\' as '/'"),
        ("/srv/root/a\\b%EF%BC%8Fc/%2e%2e/%2e%2e", "percent-decoded"),
        ("/srv/root/a%EF%BC%8Fb%5c%2e%2e%5c%2e%2e", "percent-decoded with '\\' as '/'"),
        ("/srv/root/a\\b/%E2%80%A4%E2%80%A4/%E2%80%A4%E2%80%A4", "percent-decoded and NFKC-normalized"),
        (
            "/srv/root/%E2%80%A4%E2%80%A4%5c%E2%80%A4%E2%80%A4",
            "percent-decoded and NFKC-normalized with '\\' as '/'",
        ),
    ],
)
def test_each_reading_is_checked_on_its_own_since_a_stronger_one_can_hide_an_escape(
    path: str, reading: str
) -> None:
    # Reading '\\', %2f or U+FF0F as '/' adds a segment that one more '..' must undo: in each of these paths,
    # only the named reading leaves the root.
    assert BINDING.refusal(path, ROOT) == f"leaves the run's root when read {reading}"


@pytest.mark.parametrize(
    "root", ["/srv/root/", "/srv/../srv/root", "//srv/root", "srv/root", "/srv/\u2024", "/srv/\x00"]
)
def test_a_root_not_in_normal_form_admits_nothing(root: str) -> None:
    refusal = BINDING.refusal(f"{root.rstrip('/')}/a.txt", root)

    assert refusal == "cannot be checked: the run's root is not an absolute path in normal form"


def test_the_file_system_root_admits_every_normal_path() -> None:
    assert BINDING.admits("/etc/passwd", "/")
    assert BINDING.admits("/", "/")
    assert not BINDING.admits("/etc/../passwd", "/")


def test_a_value_that_is_not_text_is_refused() -> None:
    assert BINDING.refusal(["/srv/root"], ROOT) == "is not a path"
    assert BINDING.refusal("/srv/root", None) == "cannot be checked: the run's root is not a path"


# ---------------------------------------------------------------- property: every reading stays within

# Pieces of segments a confused or hostile planner might write: encodings of '.', '/', '\\' and NUL, their
# Unicode look-alikes, and the plain text around them.
PIECES = [
    *("a", "b.txt", "ü", "u\u0308", ".", "..", "", "\\", "%", "%zz", "%20", "%00"),
    *("%2e", "%2E", "%252e", "%25252e", "%2f", "%2F", "%252f", "%5c", "%5C", "%C0%AE", "%c3%bc"),
    *("\u2024", "\uff0e", "\uff0f", "\uff3c", "%E2%80%A4", "%EF%BC%8F", "%EF%BC%8E"),
]
segments = st.lists(st.sampled_from(PIECES), max_size=4).map("".join)
paths = st.builds(
    lambda start, parts: start + "/" + "/".join(parts),
    st.sampled_from([ROOT, ROOT, ROOT, "/srv", "/srv/rootx", ""]),
    st.lists(segments, max_size=5),
) | st.just(ROOT)


def every_reading(path: str) -> set[str]:
    """Each text a server might act on: decoded (as UTF-8 or as Latin-1, to a fixed point) or not, NFKC or
    not, ``\\`` as ``/`` or not. Written apart from the implementation so that it checks it."""
    decodings = {path}
    for encoding in ("utf-8", "latin-1"):
        text = path
        for _ in range(12):
            text = unquote(text, encoding=encoding, errors="replace")
        decodings.add(text)
    normalized = decodings | {unicodedata.normalize("NFKC", text) for text in decodings}
    return normalized | {text.replace("\\", "/") for text in normalized}


@PROPERTY_SETTINGS
@given(path=paths)
def test_an_admitted_path_stays_under_the_root_however_a_server_reads_it(path: str) -> None:
    if not BINDING.admits(path, ROOT):
        return
    for reading in every_reading(path):
        resolved = posixpath.normpath(reading)
        assert "\x00" not in reading, (path, reading)
        assert resolved == ROOT or resolved.startswith(ROOT + "/"), (path, reading)


def test_path_refusal_names_the_runs_key_it_checks_against() -> None:
    assert path_refusal("/srv/rootx", ROOT, "reports") == "is not within the run's reports"

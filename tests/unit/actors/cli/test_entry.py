"""``raydag run`` and ``continue`` read their arguments as typer does, or leave them to typer."""

from __future__ import annotations

import pytest

from actors.cli.entry import CONTINUE, RUN, parsed


def test_options_are_read_as_typer_reads_them() -> None:
    words = [
        "C-102",
        "--resource",
        "a=1",
        "--resource=b=2",
        "--json",
        "--no-attach",
        "--goal=why",
        "--goal",
        "g",
    ]
    assert parsed(RUN, words) == (
        ["C-102"],
        {"resource": ["a=1", "b=2"], "as_json": True, "attach": False, "goal": "g"},
    )
    assert parsed(RUN, ["--", "-C-1"]) == (["-C-1"], {})
    assert parsed(CONTINUE, ["R", "--budget", "deadline_s=9", "--budget", "x=1"]) == (
        ["R"],
        {"budget": ["deadline_s=9", "x=1"]},
    )


@pytest.mark.parametrize(
    "words",
    [
        ["C-102", "--bogus"],  # an option it does not know
        ["C-102", "--goal"],  # a value missing
        ["C-102", "--goal", "-x"],  # a value that looks like an option
        ["C-102", "--json=yes"],  # a flag given a value
        ["C-101", "C-102"],  # an argument too many
        ["-h"],
    ],
)
def test_what_typer_should_read_is_left_to_it(words: list[str]) -> None:
    assert parsed(RUN, words) is None

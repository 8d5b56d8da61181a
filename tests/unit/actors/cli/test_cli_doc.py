"""docs/CLI.md names every command there is, and every command that speaks HTTP as one that takes ``--url`` and
``--api-key``: a command added, or given a URL, without its line in the docs fails here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from actors.cli.main import app
from tests.conftest import REPO

CLI_MD = (REPO / "docs" / "CLI.md").read_text()


def commands(command: Any, path: tuple[str, ...] = ("raydag",)) -> Iterator[tuple[str, Any]]:
    """Each command's full name (``raydag approvals approve``) and its click command."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield " ".join(path), command
        return
    for name, sub in subcommands.items():
        yield from commands(sub, (*path, name))


ALL = dict(commands(typer.main.get_command(app)))


def test_every_command_has_its_row() -> None:
    tops = {" ".join(name.split()[:2]) for name in ALL}
    assert [top for top in sorted(tops) if f"| `{top}" not in CLI_MD] == []


def test_every_command_that_speaks_http_is_named_with_its_url_and_key() -> None:
    http = [name for name, command in ALL.items() if any("--url" in param.opts for param in command.params)]
    paragraph = CLI_MD[CLI_MD.index("The commands that speak to a raydag over its HTTP API") :].split("\n\n")[
        0
    ]
    assert "--api-key" in paragraph
    assert [name for name in http if f"`{name}" not in paragraph] == []
    assert all(any("--api-key" in param.opts for param in ALL[name].params) for name in http)

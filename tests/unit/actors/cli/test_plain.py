"""Output without rich reads as rich's did: the same quoting, the same markup's text, the same table."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from rich.markup import escape as rich_escape
from rich.markup import render as rich_render
from rich.table import Table

from actors.cli.plain import escape, plain, render, table

AWKWARD = ["plain", "a [red] b", "x[1]", "[/x]", "ends with \\", "\\[bold]", "[link=a]z[/link]", "[ok"]


@pytest.mark.parametrize("text", AWKWARD)
def test_text_is_quoted_as_rich_quotes_it_and_prints_as_it_is(text: str) -> None:
    assert escape(text) == rich_escape(text)
    assert plain(escape(text)) == rich_render(escape(text)).plain


def test_markup_prints_its_text_alone_in_a_pipe_and_coloured_at_a_terminal() -> None:
    markup = f"[red]refused {escape('[it]')}:[/red] [dim]why[/dim]"
    assert plain(markup) == "refused [it]: why"
    coloured = render(markup, colour=True)
    assert "\x1b[31m" in coloured
    assert "\x1b[2m" in coloured
    assert coloured.endswith("why\x1b[0m")


def test_a_table_is_drawn_as_rich_draws_it() -> None:
    rows = [("case", "caseops_get_case", "—", "12"), ("resolve[0]", "a tool (for each of docs)", "docs", "3")]
    drawn = Table(title="plan for C-102 (DAG)", title_justify="left")
    for column in ("node", "tool", "waits for", "ms"):
        drawn.add_column(column, justify="right" if column == "ms" else "left")
    for row in rows:
        drawn.add_row(*row)
    printed = io.StringIO()
    Console(file=printed, width=200).print(drawn)

    assert table("plan for C-102 (DAG)", ("node", "tool", "waits for", "ms"), rows, right=("ms",)).split(
        "\n"
    ) == [line.rstrip() for line in printed.getvalue().splitlines()]

"""Terminal output without rich, for the commands a person waits on (``raydag run`` attached to a raydag that is
up, ``raydag continue``): rich costs a command's start ~50 ms to import (docs/BENCHMARKS.md).

The messages keep rich's markup, so that a line reads the same printed here or by a rich console: ``say``
renders its few styles (``[red]``, ``[yellow]``, ``[green]``, ``[dim]``, ``[bold]``) as ANSI colours at a
terminal and drops them for a pipe or a file; ``escape`` quotes text as rich's own ``escape`` does. ``table``
draws a table as rich draws its default one, at its natural width.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

_TAG = re.compile(r"(\\*)\[([a-z#/@][^[]*?)]")
"""A markup tag (``[red]``, ``[/red]``, ``[/]``) after any backslashes; an odd number of them quotes it."""
_STYLES = {"red": "31", "yellow": "33", "green": "32", "dim": "2", "bold": "1", "italic": "3"}


def escape(text: str) -> str:
    """``text`` with whatever reads as a markup tag quoted, so that it prints as it is (rich's ``escape``)."""
    quoted = _TAG.sub(lambda found: f"{found[1] * 2}\\[{found[2]}]", text)
    trailing = len(quoted) - len(quoted.rstrip("\\"))
    return quoted + "\\" if trailing % 2 else quoted


def render(markup: str, *, colour: bool) -> str:
    """``markup`` as the terminal shows it: its styles as ANSI codes (``colour``) or dropped, quotes undone."""
    out: list[str] = []
    styles: list[str] = []
    position = 0
    for found in _TAG.finditer(markup):
        slashes, tag = found[1], found[2]
        out.append(markup[position : found.start()] + "\\" * (len(slashes) // 2))
        position = found.end()
        if len(slashes) % 2:  # quoted: the tag is text
            out.append(f"[{tag}]")
            continue
        if tag.startswith("/"):
            if styles:
                styles.pop()
        else:
            styles.append(";".join(_STYLES[word] for word in tag.split() if word in _STYLES))
        if colour:
            out.append("\x1b[0m" + "".join(f"\x1b[{style}m" for style in styles if style))
    out.append(markup[position:])
    return "".join(out) + ("\x1b[0m" if colour and styles else "")


def say(markup: str = "", *, stderr: bool = False) -> None:
    """Print a line of ``markup``: in colour at a terminal, plain otherwise."""
    stream: TextIO = sys.stderr if stderr else sys.stdout
    stream.write(render(markup, colour=stream.isatty()) + "\n")
    stream.flush()


def fail(markup: str, code: int) -> NoReturn:
    """Say ``markup`` on stderr and end the command with exit ``code``."""
    say(markup, stderr=True)
    raise SystemExit(code)


def plain(markup: str) -> str:
    """``markup``'s text alone, for a table's cell or a report."""
    return render(markup, colour=False)


def table(
    title: str, columns: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[str] = ()
) -> str:
    """A titled table as rich draws its default one (a heavy head, light rules), every cell whole; the
    ``right`` columns right-aligned."""
    widths = [max(len(column), *(len(row[index]) for row in rows)) for index, column in enumerate(columns)]

    def line(cells: Sequence[str], edge: str, between: str) -> str:
        aligned = (
            cell.rjust(width) if column in right else cell.ljust(width)
            for cell, width, column in zip(cells, widths, columns, strict=True)
        )
        return f"{edge} " + f" {between} ".join(aligned) + f" {edge}"

    def rule(left: str, fill: str, cross: str, end: str) -> str:
        return left + cross.join(fill * (width + 2) for width in widths) + end

    return "\n".join(
        (
            title,
            rule("┏", "━", "┳", "┓"),
            line(columns, "┃", "┃"),
            rule("┡", "━", "╇", "┩"),
            *(line(row, "│", "│") for row in rows),
            rule("└", "─", "┴", "┘"),
        )
    )

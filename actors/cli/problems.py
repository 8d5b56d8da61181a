"""A refusal as the terminal shows it: what was refused and why, then every member a person acts on (the
fields at fault, the names the server knows, the limits), one line each. The API's problems (``api_request``)
and the supervisor's own refusals (``raydag run``, ``batch``) are worded alike."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from actors.cli.plain import escape, plain, say
from actors.cli.report import EXIT_BAD_INPUT, EXIT_RUN_FAILED

if TYPE_CHECKING:
    from actors.run.submission import SubmitResult

_SAID = frozenset({"type", "title", "status", "detail", "instance"})
"""A problem's members its first line already says (RFC 9457's own)."""


@dataclass(frozen=True)
class Refused:
    """What was refused (``headline``, rich markup), the members that say more, and the exit code."""

    headline: str
    members: tuple[str, ...]
    exit_code: int

    @property
    def text(self) -> str:
        """The headline, then each member indented on a line of its own (rich markup)."""
        return "\n".join((self.headline, *(f"  {escape(member)}" for member in self.members)))

    @property
    def line(self) -> str:
        """All of it on one plain line, for a table's cell or a report."""
        return "; ".join((plain(self.headline), *self.members))


def problem(answer: Mapping[str, Any], *, status: int, retry: bool) -> Refused:
    """The API's problem ``answer`` (RFC 9457) to a request answered ``status``: exit 1 when the same request
    may be tried again (``retry``, or a 5xx), 2 when the request must change."""
    slug = str(answer.get("type", "")).rsplit("/", 1)[-1]
    title = str(answer.get("title", status))
    named = f"{title} ({slug})" if slug else title
    detail = str(answer.get("detail", ""))
    code = EXIT_RUN_FAILED if retry or status >= 500 else EXIT_BAD_INPUT
    return Refused(f"[red]{escape(named)}:[/red] {escape(detail)}", members(answer, detail), code)


def refusal_of(submitted: SubmitResult, *, resource: Mapping[str, str], tenant: str) -> Refused | None:
    """Why a submission started no run, as every surface words it, and the exit code that says so (2: the
    request must change; 1: it may be retried later); ``None`` if it started one."""
    from actors.run.submission import Submission

    refusal = submitted.refusal()
    if refusal is None:
        return None
    code = EXIT_BAD_INPUT if refusal.requester_must_act else EXIT_RUN_FAILED
    if submitted.outcome is Submission.RESOURCE_NOT_FOUND:  # the console knows the tenant, and the remedy
        what = f"case {resource['case_id']!r}" if "case_id" in resource else f"resource {dict(resource)!r}"
        headline = (
            f"[red]{escape(what)} was not found for tenant {escape(repr(tenant))}.[/red] "
            "Load data with `raydag seed FILE` (or `raydag seed --demo`)."
        )
        return Refused(headline, (), code)
    headline = f"[red]no run was started ({escape(refusal.problem)}):[/red] {escape(refusal.detail)}"
    return Refused(headline, members(refusal.fields, refusal.detail), code)


def members(answer: Mapping[str, Any], detail: str) -> tuple[str, ...]:
    """A line per member of ``answer`` beyond what its first line says: each field at fault (``errors``) as
    ``location: message``, any other as ``name: value``; a value that repeats ``detail`` is left out."""
    lines: list[str] = []
    for name, value in answer.items():
        if name in _SAID or value is None:
            continue
        if name == "errors" and isinstance(value, list):
            lines.extend(_field_error(error) for error in value)
        else:
            lines.append(f"{name}: {_value(value, detail)}")
    return tuple(lines)


def _field_error(error: Any) -> str:
    if isinstance(error, Mapping):
        return f"{error.get('location', '?')}: {error.get('message', '')}"
    return str(error)


def _value(value: Any, detail: str) -> str:
    """``a, b, c`` for a list; ``key value, …`` for an object (nested in parentheses); the value otherwise."""
    if isinstance(value, Mapping):
        return ", ".join(
            f"{key} {_nested(item, detail)}"
            for key, item in value.items()
            if item is not None and item != detail
        )
    if isinstance(value, list | tuple):
        return ", ".join(_nested(item, detail) for item in value) or "(none)"
    return str(value)


def _nested(value: Any, detail: str) -> str:
    return f"({_value(value, detail)})" if isinstance(value, Mapping | list | tuple) else str(value)


def said_as_configuration_mistake(exc: Exception) -> bool:
    """Whether ``exc`` is a configuration mistake (a setting, the toolsets file, a database that does not
    answer), said here in one line naming what to fix; the command then exits 2."""
    # Imported here: a command that only speaks HTTP never loads the settings or the toolsets (nor the MCP SDK
    # they import), and either module is loaded already if it raised.
    from actors.launch.settings import ConfigurationError
    from actors.toolsets import ToolsetsInvalid

    if isinstance(exc, ConfigurationError):
        say(f"[red]configuration error:[/red] {escape(str(exc))}", stderr=True)
    elif isinstance(exc, ToolsetsInvalid):
        say(f"[red]invalid toolsets file:[/red] {escape(str(exc))}", stderr=True)
    else:
        return False
    return True

"""What the run commands' arguments mean, read without typer or rich (``raydag run`` attached parses its own:
``actors.cli.entry``): the run's resource from a bare value and ``--resource`` pairs, a plan file, and the
settings with ``--toolsets``. A bad argument ends the command here, in one line naming it, exit 2."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.cli.plain import escape, fail
from actors.cli.report import EXIT_BAD_INPUT

if TYPE_CHECKING:
    from actors.launch.settings import Settings

INVESTIGATE = "investigate"
"""The stage a run has unless it names one: ``dag.contracts.INVESTIGATE``, written out so that the command's
start does not import the core's contracts (``tests/unit/actors/cli/test_main_imports.py`` holds them equal).
"""

TOOLSETS_ENV = "RAYDAG_TOOLSETS"
"""``actors.toolsets.TOOLSETS_ENV``, and the shipped toolsets' one resource key: written out for the same reason
(the same test holds them equal)."""
SHIPPED_RESOURCE_KEY = "case_id"

DEMO_TENANT = "tenant-demo"
"""The tenant of the demo data and of the development keys; a command's default."""


def settings_with(toolsets: Path | None = None) -> Settings:
    """The settings, with ``--toolsets`` (if given) as ``RAYDAG_TOOLSETS``. A setting raydag cannot run with
    (``ConfigurationError``), or a malformed toolsets file (``ToolsetsInvalid``: its file, line and field), is
    raised here, before anything starts, and said in a line by ``main``."""
    from actors.launch.local import PLACEHOLDER_URL
    from actors.launch.settings import load_settings

    if toolsets is not None:  # the environment carries it to everything started from here (Serve, Ray)
        os.environ[TOOLSETS_ENV] = str(toolsets.resolve())

    settings = load_settings()
    settings.toolset_declarations(settings.mcp_url or PLACEHOLDER_URL)
    return settings


def resource_key(settings: Settings) -> str | None:
    """The one resource key the toolsets bind tools to (the shipped ones: ``case_id``), which a bare value on
    the command line stands for; ``None`` when they bind none or several."""
    from actors.launch.local import PLACEHOLDER_URL

    keys = settings.toolset_declarations(PLACEHOLDER_URL).resource_keys
    return next(iter(keys)) if len(keys) == 1 else None


def attached_resource_key(toolsets: Path | None) -> str | None:
    """What a bare value stands for in a run made by the raydag at ``--url``: the resource key of the toolsets
    named here (``--toolsets``, ``RAYDAG_TOOLSETS``: read for that alone, the raydag there runs its own), else
    the shipped toolsets' ``case_id``, read from no file (which would cost the command's start its settings)."""
    if toolsets is None and not os.environ.get(TOOLSETS_ENV):
        return SHIPPED_RESOURCE_KEY
    return resource_key(settings_with(toolsets))


def resource_of(
    value: str | None, pairs: list[str], *, key: str | None, planned: bool = False
) -> dict[str, str]:
    """The run's resource from the bare value (``key``'s) and ``--resource key=value`` options; exits on a
    bad one."""
    resource: dict[str, str] = {}
    for pair in pairs:
        name, equals, given = pair.partition("=")
        if not equals or not name or name in resource:
            fail(
                f"[red]--resource {escape(repr(pair))}:[/red] give each key once, as key=value",
                EXIT_BAD_INPUT,
            )
        resource[name] = given
    if value is not None:
        if key is None:
            fail(
                f"[red]{escape(repr(value))}:[/red] the toolsets bind no single resource key it could be: "
                "give --resource key=value",
                EXIT_BAD_INPUT,
            )
        if resource.setdefault(key, value) != value:
            fail(
                f"[red]{escape(repr(value))} and --resource {key}={escape(repr(resource[key]))} disagree[/red]",
                EXIT_BAD_INPUT,
            )
    if not resource and not planned:  # a plan of one's own may use tools that bind nothing to a resource
        fail(
            "[red]name what the run is about:[/red] a value (a case id), or --resource key=value",
            EXIT_BAD_INPUT,
        )
    return resource


def read_plan(path: Path) -> dict[str, Any]:
    """A plan file's JSON object; anything else ends the command (exit 2) naming the file and the problem.
    The plan itself is admitted by the supervisor, as a plan posted to the API is."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(f"[red]cannot read the plan {escape(str(path))}:[/red] {escape(str(exc))}", EXIT_BAD_INPUT)
    if not isinstance(document, dict):
        fail(f"[red]the plan {escape(str(path))} is not a JSON object[/red]", EXIT_BAD_INPUT)
    return document

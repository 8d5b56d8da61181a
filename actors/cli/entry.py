"""The ``raydag`` command's entry point: ``raydag run`` and ``raydag continue`` with a raydag up to make their
runs read their own arguments and go straight to its API, without typer or rich; every other command, and
these on any argument this reader does not take as it is (``--help``, an option it does not know, a value
typer would check or refuse), goes to the typer application (``actors.cli.main``), which says what it says.

Typer builds a pydantic adapter for each of a command's parameters before running it: ~150 ms of ``raydag
run``'s half second, with another ~60 for importing typer and ~50 for rich (docs/BENCHMARKS.md). The
arguments here are the same options, read the same way (``--name value``, ``--name=value``, the last of a
repeated one, ``RAYDAG_URL`` and ``RAYDAG_API_KEY`` when not given), and what the command then does is the
typer command's own code (``actors.cli.attached``): the same messages and exit codes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.cli.arguments import DEMO_TENANT, INVESTIGATE


@dataclass(frozen=True)
class Options:
    """A command's options as this reader takes them: each long name's destination, whether it is a flag
    (``--x``/``--no-x`` pairs: ``flags`` maps each spelling to its value) or repeatable."""

    values: Mapping[str, str]
    """``--name`` → the destination of an option that takes a value."""
    repeated: frozenset[str] = frozenset()
    flags: Mapping[str, tuple[str, bool]] = field(default_factory=dict)
    """``--name`` → (destination, the value it sets)."""
    positional: int = 1
    """How many arguments the command takes (at most)."""


RUN = Options(
    values={
        "--resource": "resource",
        "--tenant": "tenant",
        "--goal": "goal",
        "--idempotency-key": "idempotency_key",
        "--planner": "planner",
        "--model": "model",
        "--plan": "plan",
        "--toolsets": "toolsets",
        "--stage": "stage",
        "--url": "url",
        "--api-key": "api_key",
    },
    repeated=frozenset({"resource"}),
    flags={
        "--json": ("as_json", True),
        "--review": ("review", True),
        "--attach": ("attach", True),
        "--no-attach": ("attach", False),
    },
)
CONTINUE = Options(
    values={
        "--goal": "goal",
        "--answer": "answer",
        "--budget": "budget",
        "--url": "url",
        "--api-key": "api_key",
    },
    repeated=frozenset({"budget"}),
)


def parsed(options: Options, words: Sequence[str]) -> tuple[list[str], dict[str, Any]] | None:
    """``(arguments, {destination: value})`` from ``words``, or ``None`` for anything typer should read:
    an option not in ``options``, ``--help``, a missing value, a value that looks like an option, too many
    arguments. A repeatable option's value is the list of every one given."""
    arguments: list[str] = []
    found: dict[str, Any] = {}
    position = 0
    while position < len(words):
        word = words[position]
        position += 1
        if word == "--":  # the rest are arguments
            arguments.extend(words[position:])
            break
        if not word.startswith("-") or word == "-":
            arguments.append(word)
            continue
        name, equals, value = word.partition("=")
        if name in options.flags and not equals:
            destination, flag = options.flags[name]
            found[destination] = flag
            continue
        destination = options.values.get(name, "")
        if not destination:
            return None
        if not equals:
            if position == len(words):
                return None
            value = words[position]
            position += 1
        if value.startswith("-"):  # typer's reading of it is the one to keep
            return None
        if destination in options.repeated:
            found.setdefault(destination, []).append(value)
        else:
            found[destination] = value
    if len(arguments) > options.positional:
        return None
    return arguments, found


def _given(found: Mapping[str, Any], name: str, environment: str) -> str | None:
    """An option's value, else its environment variable's (an empty one is unset, as click reads it)."""
    value = found.get(name)
    return value if value is not None else (os.environ.get(environment) or None)


def run(words: Sequence[str]) -> bool:
    """``raydag run`` made by a raydag that is up (``--url``, ``RAYDAG_URL``, or the one serving this home);
    ``False`` when typer must read the words or no raydag is up to make it (the run is then made here)."""
    reading = parsed(RUN, words)
    if reading is None:
        return False
    arguments, found = reading
    plan = Path(found["plan"]) if "plan" in found else None
    toolsets = Path(found["toolsets"]) if "toolsets" in found else None
    if plan is not None and not (plan.is_file() and os.access(plan, os.R_OK)):
        return False  # typer says what is wrong with it
    if toolsets is not None and toolsets.is_dir():
        return False
    url = _given(found, "url", "RAYDAG_URL")
    api_key = _given(found, "api_key", "RAYDAG_API_KEY")
    from actors.cli.attached import run_there
    from actors.cli.client import serving_here

    if url is None and found.get("attach", True):
        url, api_key = serving_here(toolsets, found.get("tenant", DEMO_TENANT), api_key)
    if url is None:
        return False
    from actors.cli.report import shown

    report = run_there(
        url,
        api_key,
        case_id=arguments[0] if arguments else None,
        pairs=found.get("resource", []),
        toolsets=toolsets,
        goal=found.get("goal"),
        key=found.get("idempotency_key"),
        planner=found.get("planner"),
        plan=plan,
        review=found.get("review", False),
        stage=found.get("stage", INVESTIGATE),
        model=found.get("model"),
    )
    raise SystemExit(shown(report, as_json=found.get("as_json", False)))


def continue_run(words: Sequence[str]) -> bool:
    """``raydag continue RUN_ID``; ``False`` when typer must read the words."""
    reading = parsed(CONTINUE, words)
    if reading is None or len(reading[0]) != 1:
        return False
    (run_id,), found = reading
    from actors.cli.attached import continue_there

    continue_there(
        run_id,
        goal=found.get("goal"),
        answer=found.get("answer"),
        budgets=found.get("budget", []),
        url=_given(found, "url", "RAYDAG_URL"),
        api_key=_given(found, "api_key", "RAYDAG_API_KEY"),
    )
    return True


LEAN: dict[str, Callable[[Sequence[str]], bool]] = {"run": run, "continue": continue_run}
"""The commands read here when a raydag is up to make their runs."""


def main() -> None:
    """The ``raydag`` command (``pyproject.toml``'s script)."""
    words = sys.argv[1:]
    lean = LEAN.get(words[0]) if words else None
    if lean is not None and "--help" not in words:
        from actors.cli.problems import said_as_configuration_mistake
        from actors.cli.report import stopped
        from actors.launch.shutdown import catch_stop_signals, interrupted

        catch_stop_signals()  # SIGTERM stops the command as Ctrl-C does, as in main
        try:
            if lean(words[1:]):
                return
        except KeyboardInterrupt as stop:  # before its request: nothing was started
            raise SystemExit(stopped(interrupted(stop))) from None
        except Exception as exc:
            if not said_as_configuration_mistake(exc):
                raise
            raise SystemExit(2) from None
    from actors.cli.main import main as typer_main

    typer_main()

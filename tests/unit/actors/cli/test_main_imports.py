"""The ``raydag`` command loads what a command needs when it runs it: the commands that only speak HTTP
(``runs``, ``inbox``, ``watch``, ``approvals``…) start without Ray, the MCP SDK, the database driver, the web
framework or the settings, which cost a person seconds at every keystroke's command (docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "ray",
    "mcp",
    "asyncpg",
    "fastapi",
    "openai",
    "httpx",
    "psutil",
    "actors.launch.settings",
    "actors.toolsets",
    "dag.contracts",
    "dag.run_state",
)


def test_the_command_starts_without_ray_mcp_the_database_or_the_settings() -> None:
    code = (
        "import json, sys; import actors.cli.main; "
        "print(json.dumps(sorted({name.split('.')[0] if not name.startswith('actors') else name "
        "for name in sys.modules})))"
    )
    loaded = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        )
    )
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_attached_commands_start_without_typer_rich_httpx_or_pydantic() -> None:
    """What ``raydag run`` and ``raydag continue`` load to make a run on a raydag that is up: typer, rich and
    pydantic cost it ~250 ms (docs/BENCHMARKS.md); the whole path is run by test_cli_attached."""
    code = (
        "import json, sys; import actors.cli.entry, actors.cli.attached, actors.cli.report; "
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    loaded = set(
        json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        )
    )
    assert not loaded & {*HEAVY, "typer", "click", "rich", "pydantic"}, sorted(
        loaded & {*HEAVY, "typer", "rich"}
    )


def test_what_the_command_writes_out_is_what_the_runtime_says() -> None:
    from actors.cli import arguments as main
    from actors.launch.local import PLACEHOLDER_URL
    from actors.launch.settings import load_settings
    from actors.toolsets import TOOLSETS_ENV
    from dag.contracts import INVESTIGATE

    assert main.INVESTIGATE == INVESTIGATE
    assert main.TOOLSETS_ENV == TOOLSETS_ENV
    shipped = load_settings().toolset_declarations(PLACEHOLDER_URL).resource_keys
    assert set(shipped) == {main.SHIPPED_RESOURCE_KEY}

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


def test_the_commands_default_stage_is_the_cores() -> None:
    from actors.cli.main import INVESTIGATE as COMMAND_DEFAULT
    from dag.contracts import INVESTIGATE

    assert COMMAND_DEFAULT == INVESTIGATE

"""``import raydag``: the README's example, run as a user's script with its own ``ray.init()``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.integration.test_cli import environment

TOY = REPO / "tests" / "integration" / "toy_mcp_server.py"


def readme_example() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Python API\n") :]
    found = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert found is not None
    return found.group(1)


def test_the_readme_example_runs_a_plan_over_a_toolset_from_a_script_with_its_own_ray(
    dsn: str, tmp_path: Path
) -> None:
    (tmp_path / "toolsets.yaml").write_text(
        f"""\
servers:
  - name: toy
    transport: stdio
    command: {sys.executable}
    args: ["{TOY}"]
    tools:
      echo: {{scope: toy:read, risk: read_only}}
"""
    )
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    env = environment(tmp_path / "home", RAYDAG_DATABASE_URL=dsn, RAY_ADDRESS="local")
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=240)
    finally:
        # The script's own Ray outlives it for a while: nothing it started may stay behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)

    assert process.returncode == 0, stderr[-3000:]
    lines = stdout.splitlines()
    assert re.fullmatch(r"completed {'outputs': {'hi': {'pid': \d+, 'text': 'hello'}}}", lines[0]), lines
    assert lines[1] == "[('hi', 'echo', 'succeeded')]"


def test_the_public_surface_is_reexported_from_one_place() -> None:
    import raydag
    from actors import python_api

    assert raydag.__all__ == python_api.__all__
    assert raydag.start is python_api.start
    assert raydag.Run.__module__ == "actors.python_api.session"

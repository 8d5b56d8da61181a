"""``make lint`` enforces the layers, not a description of them: the project's own import-linter contracts,
run over a small tree of the same package names, keep a tree that follows them and break on each kind of
wrong arrow (the runtime importing the worked example, a room importing one above it, the run's logic
importing Ray, a cycle)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

TREE = {
    "dag/__init__.py": "",
    "dag/core.py": "",
    "planner/__init__.py": "",
    "planner/base.py": "import dag.core\n",
    "mcp_server/__init__.py": "",
    "mcp_server/server.py": "import dag.core\n",
    "mcp_server/tools.py": "import mcp_server.server\n",
    "actors/__init__.py": "",
    **{
        f"actors/{room}/__init__.py": ""
        for room in ("cli", "python_api", "api", "launch", "run", "calls", "toolsets", "store", "observe")
    },
    "actors/supervisor.py": "import actors.run.service\n",
    "actors/cli/main.py": "import actors.launch.local\n",
    "actors/launch/local.py": "import actors.supervisor\n",
    "actors/run/service.py": "import actors.calls.call\nimport planner.base\n",
    "actors/calls/call.py": "import actors.toolsets.config\n",
    "actors/toolsets/config.py": "import actors.store.runs\n",
    "actors/store/runs.py": "import dag.core\n",
    "actors/observe/metrics.py": "",
    "serve_app.py": "",
}
"""A tree shaped like the project's, every import pointing down."""


def importlinter_section() -> str:
    """The ``[tool.importlinter]`` tables of the project's ``pyproject.toml``, as written there."""
    kept, inside = [], False
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            inside = line.lstrip("[").startswith("tool.importlinter")
        if inside:
            kept.append(line)
    return "\n".join(kept) + "\n"


def lint(tmp_path: Path, *changes: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "pyproject.toml").write_text(importlinter_section())
    for path, text in {**TREE, **dict(changes)}.items():
        file = tmp_path / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("")
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_tree_whose_imports_point_down_keeps_every_contract(tmp_path: Path) -> None:
    done = lint(tmp_path)

    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("path", "text", "broken"),
    [
        (
            "actors/run/service.py",
            "import mcp_server.server\n",
            "actors and mcp_server import nothing of each other",
        ),
        (
            "mcp_server/tools.py",
            "import actors.store.runs\n",
            "actors and mcp_server import nothing of each other",
        ),
        (
            "actors/store/runs.py",
            "import actors.run.service\n",
            "inside actors, imports point down its rooms",
        ),
        ("actors/run/service.py", "import actors.calls.call\nimport ray\n", "a run's logic is free of Ray"),
        ("dag/core.py", "import planner.base\n", "the planners above dag"),
        ("mcp_server/server.py", "import dag.core\nimport mcp_server.tools\n", "no import cycles"),
    ],
)
def test_each_wrong_arrow_breaks_its_contract(tmp_path: Path, path: str, text: str, broken: str) -> None:
    done = lint(tmp_path, (path, text))

    assert done.returncode != 0
    lines = done.stdout.replace("\n", " ")
    assert broken in " ".join(lines.split()), done.stdout
    assert "BROKEN" in done.stdout

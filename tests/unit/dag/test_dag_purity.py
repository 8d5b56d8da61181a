"""The core stays pure: importing ``dag`` loads no effectful stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dag

EFFECTFUL_MODULES = ("ray", "asyncpg", "fastapi", "starlette", "mcp", "opentelemetry", "httpx", "openai")

PROBE = """
import json, sys
import dag
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_importing_dag_loads_none_of_the_effectful_stacks() -> None:
    project_root = Path(dag.__file__).resolve().parent.parent
    completed = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=project_root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = set(json.loads(completed.stdout))

    assert "dag" in loaded
    assert sorted(loaded & set(EFFECTFUL_MODULES)) == []

"""Wall time of ``raydag demo`` as a user sees it: a new process each time, embedded PostgreSQL, local Ray.

``first start`` uses an empty RAYDAG_HOME (initdb runs); ``later starts`` reuse it. Samples interleave.
A smoke run makes one start of each kind, joining the smoke run's Ray and using a database of its own: the
CLI's path is the same, and it costs seconds instead of a minute.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench._harness import fresh_database
from bench._ray import SMOKE_RAY, local_ray
from bench._smoke import SMOKE
from bench._stats import HEADER, row

REPO = Path(__file__).resolve().parent.parent
SAMPLES = int(os.environ.get("BENCH_DEMO_SAMPLES", "3"))


def _demo(home: Path, joined: dict[str, str] | None = None) -> float:
    """One ``raydag demo`` in a new process; ``joined`` may name the Ray and the database it should use."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAYDAG_", "RAY_ADDRESS"))}
    env.update(RAYDAG_HOME=str(home), RAY_USAGE_STATS_ENABLED="0", **(joined or {}))
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "raydag"), "demo"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or "DOCUMENTS_COMPLETE_AFTER_NORMALIZATION" not in done.stdout:
        raise RuntimeError(f"raydag demo failed:\n{done.stdout}\n{done.stderr}")
    return elapsed


def main() -> None:
    base = REPO / ".raydag-bench"
    first: list[float] = []
    later: list[float] = []
    warm_home = base / "warm"
    shutil.rmtree(base, ignore_errors=True)
    if SMOKE:  # one start of each kind: the second reuses the home the first one made
        with fresh_database() as dsn, local_ray(**SMOKE_RAY):
            import ray

            joined = {"RAY_ADDRESS": ray.get_runtime_context().gcs_address, "RAYDAG_DATABASE_URL": dsn}
            first.append(_demo(warm_home, joined))
            later.append(_demo(warm_home, joined))
    else:
        _demo(warm_home)
        for index in range(SAMPLES):
            first.append(_demo(base / f"fresh-{index}"))
            later.append(_demo(warm_home))
    shutil.rmtree(base, ignore_errors=True)
    print("\n### `raydag demo` wall time\n")
    print(HEADER)
    print(row("first start (empty RAYDAG_HOME: initdb, migrations, seed)", first))
    print(row("later starts (existing RAYDAG_HOME)", later))

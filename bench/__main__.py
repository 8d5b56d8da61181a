"""``make bench`` / ``python -m bench [--smoke] [NAME ...]``: run benchmarks and print Markdown for
docs/BENCHMARKS.md. ``--smoke`` runs each once on a tiny sample, only to show that it still works."""

from __future__ import annotations

import importlib
import os
import sys
from contextlib import ExitStack

BENCHMARKS = {
    "c102": "bench.c102_latency",
    "demo": "bench.demo_wall_time",
    "cold-start": "bench.cold_start",
    "parallel": "bench.parallel_efficiency",
    "control-plane": "bench.control_plane",
    "large-outputs": "bench.large_outputs",
    "storage": "bench.storage",
    "mcp": "bench.mcp_latency",
    "load": "bench.load",
    "serve-parallel": "bench.serve_parallel",
    "streaming": "bench.streaming",
    "batch": "bench.batch",
    "shipped-cpu": "bench.shipped_cpu",
    "layer": "bench.layer_timeline",
    "effects": "bench.effects",
    "scale": "bench.scale",
    "waiting": "bench.waiting",
    "cli": "bench.cli_start",
    "long-tasks": "bench.long_tasks",
    "agents": "bench.agents",
}
"""Each benchmark's module; imported only when it runs, after ``--smoke`` has chosen its sizes."""


def main(argv: list[str]) -> None:
    if "--smoke" in argv:
        os.environ["BENCH_SMOKE"] = "1"  # before bench._smoke, which every benchmark reads its sizes from
        argv = [arg for arg in argv if arg != "--smoke"]
    from bench._ray import SMOKE_RAY, local_ray
    from bench._smoke import SMOKE

    names = argv or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}")
    with ExitStack() as stack:
        if SMOKE:
            stack.enter_context(local_ray(**SMOKE_RAY))  # one Ray for every benchmark of the smoke run
        for name in names:
            importlib.import_module(BENCHMARKS[name]).main()


if __name__ == "__main__":
    main(sys.argv[1:])

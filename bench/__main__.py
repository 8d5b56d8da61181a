"""``make bench`` / ``python -m bench [NAME ...]``: run benchmarks and print Markdown for docs/BENCHMARKS.md."""

from __future__ import annotations

import sys

from bench import (
    c102_latency,
    control_plane,
    demo_wall_time,
    large_outputs,
    load,
    mcp_latency,
    parallel_efficiency,
    storage,
    streaming,
)

BENCHMARKS = {
    "c102": c102_latency.main,
    "demo": demo_wall_time.main,
    "parallel": parallel_efficiency.main,
    "control-plane": control_plane.main,
    "large-outputs": large_outputs.main,
    "storage": storage.main,
    "mcp": mcp_latency.main,
    "load": load.main,
    "streaming": streaming.main,
}


def main(argv: list[str]) -> None:
    names = argv or list(BENCHMARKS)
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        sys.exit(f"unknown benchmark(s) {unknown}; known: {sorted(BENCHMARKS)}")
    for name in names:
        BENCHMARKS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])

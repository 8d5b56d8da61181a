"""Small summaries of timing samples."""

from __future__ import annotations

import statistics


def summary(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "n": len(ordered),
        "median": statistics.median(ordered),
        "p90": ordered[max(0, round(0.9 * len(ordered)) - 1)],
        "min": ordered[0],
        "max": ordered[-1],
    }


def row(label: str, samples_ms: list[float]) -> str:
    s = summary(samples_ms)
    return (
        f"| {label} | {s['n']:.0f} | {s['median']:.0f} | {s['p90']:.0f} | {s['min']:.0f} | {s['max']:.0f} |"
    )


HEADER = "| measurement | n | median ms | p90 ms | min ms | max ms |\n|---|---|---|---|---|---|"

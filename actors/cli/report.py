"""A run as the CLI shows it: read from the store with its nodes, printed as its plan, a timeline of its
calls and its result, and the exit code its status stands for."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from dag.states import RunStatus

if TYPE_CHECKING:
    from dag.plan import AgentSpec

EXIT_NEEDS_HUMAN = 3
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2


def console_for(*, stderr: bool = False) -> Console:
    """Rich output that wraps lines for a person at a terminal, and never wraps or cuts them for a program
    reading a pipe or a file (tables still fit ``COLUMNS``, 80 unless set)."""
    return Console(stderr=stderr, soft_wrap=not (sys.stderr if stderr else sys.stdout).isatty())


def agent_body(agent: AgentSpec) -> str:
    """What an agent node runs, in a few words: a model loop, a named planner's plan, or a plan of its own."""
    if agent.loop is not None:
        return f"a model loop of at most {agent.loop.max_steps} steps"
    return agent.planner or "its own plan"


def print_report(console: Console, report: dict[str, Any]) -> None:
    """The plan as a table, the node calls on a timeline, failed or denied nodes, the run's status and result."""
    run, nodes = report["run"], report["nodes"]
    about = run.get("case_id") or ", ".join(
        f"{key}={value}" for key, value in sorted(run["resource"].items())
    )
    plan = Table(title=f"plan for {about} (DAG)", title_justify="left")
    for column in ("node", "tool", "waits for"):
        plan.add_column(column)
    from dag.plan import Plan

    if run["plan"]:
        for spec in Plan.parse(run["plan"]).nodes:
            fan = f" (for each of {spec.for_each.ref}{spec.for_each.pointer})" if spec.for_each else ""
            what = spec.tool if spec.agent is None else f"agent: {agent_body(spec.agent)}"
            plan.add_row(spec.id, what + fan, ", ".join(spec.dependencies) or "—")
    console.print(plan)

    timed = [node for node in nodes if node["started_at"] and node["finished_at"]]
    if timed:
        origin = min(datetime.fromisoformat(node["started_at"]) for node in timed)
        end = max(datetime.fromisoformat(node["finished_at"]) for node in timed)
        span_ms = max((end - origin).total_seconds() * 1000, 1.0)
        timeline = Table(title="node timings (ms from the first tool call)", title_justify="left")
        for column in ("node", "status", "start", "duration"):
            timeline.add_column(column, justify="right" if column in ("start", "duration") else "left")
        width = 32
        timeline.add_column("timeline", no_wrap=True, overflow="crop", min_width=width)
        for node in timed:
            start = (datetime.fromisoformat(node["started_at"]) - origin).total_seconds() * 1000
            duration = (
                datetime.fromisoformat(node["finished_at"]) - datetime.fromisoformat(node["started_at"])
            ).total_seconds() * 1000
            left = int(start / span_ms * width)
            bar = " " * min(left, width - 1) + "█" * max(1, round(duration / span_ms * width))
            timeline.add_row(node["node_id"], node["status"], f"{start:.0f}", f"{duration:.0f}", bar[:width])
        console.print(timeline)
    for node in nodes:
        if node["status"] in ("failed", "denied"):
            reason = node["error"] or node["decision"]
            console.print(f"[yellow]{node['node_id']} {node['status']}:[/yellow] {reason}")
    colour = "green" if run["status"] == RunStatus.COMPLETED else "yellow"
    console.print(
        f"run {run['run_id']}: [{colour}]{run['status']}[/{colour}]"
        + (f" ({run['stop_reason']}: {run['detail']})" if run["stop_reason"] else "")
    )
    if run["result"] is not None:
        console.print_json(json.dumps(run["result"], ensure_ascii=False))


def exit_code(report: dict[str, Any]) -> int:
    return status_exit_code(report["run"]["status"])


def status_exit_code(status: str) -> int:
    if status == RunStatus.COMPLETED:
        return 0
    return EXIT_NEEDS_HUMAN if status == RunStatus.NEEDS_HUMAN else EXIT_RUN_FAILED

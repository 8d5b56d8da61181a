"""A run as the CLI shows it: its plan as a table, a timeline of its calls and its result, and the exit code
its status stands for. Drawn without rich (``actors.cli.plain``): an attached ``raydag run`` prints it, and
its start should not pay for rich or for the plan's pydantic models (docs/BENCHMARKS.md)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from actors.cli.plain import escape, say, table
from dag.states import RunStatus

if TYPE_CHECKING:
    from rich.console import Console

    from actors.launch.shutdown import Interrupted

EXIT_NEEDS_HUMAN = 3
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
TIMELINE_WIDTH = 32


def console_for(*, stderr: bool = False) -> Console:
    """Rich output that wraps lines for a person at a terminal, and never wraps or cuts them for a program
    reading a pipe or a file (tables still fit ``COLUMNS``, 80 unless set)."""
    from rich.console import Console  # here: the commands that print through plain never load rich

    return Console(stderr=stderr, soft_wrap=not (sys.stderr if stderr else sys.stdout).isatty())


def shown(report: dict[str, Any], *, as_json: bool) -> int:
    """Print the run as ``raydag run`` does (``as_json``: the run and its nodes as JSON); its exit code."""
    if as_json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    else:
        print_report(report)
    return exit_code(report)


def print_report(report: dict[str, Any]) -> None:
    """The plan as a table, the node calls on a timeline, failed or denied nodes, the run's status and result."""
    for line in report_lines(report):
        say(line)


def report_lines(report: dict[str, Any]) -> Iterator[str]:
    """``print_report``'s lines, in rich markup (each a table's whole drawing, or a line)."""
    run, nodes = report["run"], report["nodes"]
    about = run.get("case_id") or ", ".join(
        f"{key}={value}" for key, value in sorted(run["resource"].items())
    )
    planned = [_plan_row(node) for node in (run["plan"] or {}).get("nodes", ())]
    yield escape(table(f"plan for {about} (DAG)", ("node", "tool", "waits for"), planned))

    timed = [node for node in nodes if node["started_at"] and node["finished_at"]]
    if timed:
        yield escape(
            table(
                "node timings (ms from the first tool call)",
                ("node", "status", "start", "duration", "timeline"),
                _timeline(timed),
                right=("start", "duration"),
            )
        )
    for node in nodes:
        if node["status"] in ("failed", "denied"):
            reason = node["error"] or node["decision"]
            yield f"[yellow]{node['node_id']} {node['status']}:[/yellow] {escape(str(reason))}"
    colour = "green" if run["status"] == RunStatus.COMPLETED else "yellow"
    yield (
        f"run {run['run_id']}: [{colour}]{run['status']}[/{colour}]"
        + (f" ({run['stop_reason']}: {escape(str(run['detail']))})" if run["stop_reason"] else "")
    )
    if run["result"] is not None:
        yield escape(json.dumps(run["result"], ensure_ascii=False, indent=2))


def agent_body(agent: Mapping[str, Any]) -> str:
    """What an agent node runs (its stored ``AgentSpec``), in a few words: a model loop, a named planner's plan,
    or a plan of its own."""
    if agent.get("loop") is not None:
        return f"a model loop of at most {agent['loop']['max_steps']} steps"
    return str(agent.get("planner") or "its own plan")


def _plan_row(node: Mapping[str, Any]) -> tuple[str, str, str]:
    """A stored plan node (validated when it was accepted: ``Plan.as_json``) as the plan table's row: its id,
    what it calls, and the nodes it waits for in the order ``PlanNode.dependencies`` gives them."""
    from dag.refs import NodeRef, iter_references  # not dag.plan: its pydantic models cost ~200 ms to build

    for_each = node.get("for_each")
    waits: dict[str, None] = {for_each["$ref"]: None} if for_each else {}
    for _, reference in iter_references(node.get("args") or {}, node_id=node["id"]):
        if isinstance(reference, NodeRef):
            waits[reference.node] = None
    waits.update(dict.fromkeys(node.get("after") or ()))
    agent = node.get("agent")
    what = node.get("tool", "") if agent is None else f"agent: {agent_body(agent)}"
    fan = f" (for each of {for_each['$ref']}{for_each.get('pointer', '')})" if for_each else ""
    return node["id"], what + fan, ", ".join(waits) or "—"


def _timeline(timed: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    origin = min(datetime.fromisoformat(node["started_at"]) for node in timed)
    end = max(datetime.fromisoformat(node["finished_at"]) for node in timed)
    span_ms = max((end - origin).total_seconds() * 1000, 1.0)
    rows: list[tuple[str, ...]] = []
    for node in timed:
        started = datetime.fromisoformat(node["started_at"])
        start = (started - origin).total_seconds() * 1000
        duration = (datetime.fromisoformat(node["finished_at"]) - started).total_seconds() * 1000
        left = int(start / span_ms * TIMELINE_WIDTH)
        bar = " " * min(left, TIMELINE_WIDTH - 1) + "█" * max(1, round(duration / span_ms * TIMELINE_WIDTH))
        rows.append(
            (
                node["node_id"],
                node["status"],
                f"{start:.0f}",
                f"{duration:.0f}",
                bar[:TIMELINE_WIDTH].ljust(TIMELINE_WIDTH),
            )
        )
    return rows


def exit_code(report: dict[str, Any]) -> int:
    return status_exit_code(report["run"]["status"])


def status_exit_code(status: str) -> int:
    if status == RunStatus.COMPLETED:
        return 0
    return EXIT_NEEDS_HUMAN if status == RunStatus.NEEDS_HUMAN else EXIT_RUN_FAILED


def stopped(stop: Interrupted) -> int:
    """Say that a signal stopped the command, and return its exit code: 128 + the signal, never success."""
    say(f"stopped by {stop.name}; nothing it started is left running (exit {stop.exit_code})", stderr=True)
    return stop.exit_code

"""Finding what waits, through the HTTP API of a running raydag: ``raydag runs`` (the tenant's runs, newest
first), ``raydag inbox`` (the decisions that wait for people across them, each with the command that decides
it) and ``raydag watch RUN`` (a run followed live until it ends).

Every id is printed whole, so a person can copy it into the command that acts on it. Exit codes: 0 done (for
``watch``: the run completed), 1 the run ended otherwise or the API could not be reached, 2 refused (the
problem is printed), 3 the run needs a person (``watch``, as ``raydag run``).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

import typer
from rich.markup import escape
from rich.table import Table

from actors.cli.approvals import ApiKey, Url
from actors.cli.attached import waited_for
from actors.cli.client import api_request
from actors.cli.report import console_for, status_exit_code

console = console_for()

AsJson = Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON.")]
CaseId = Annotated[str | None, typer.Option("--case-id", help="Only runs about this case (`case_id`).")]
Resource = Annotated[
    list[str] | None,
    typer.Option(
        "--resource",
        metavar="KEY=VALUE",
        help="Only runs whose resource has KEY=VALUE (repeatable).",
        show_default=False,
    ),
]
Limit = Annotated[int, typer.Option(min=1, max=100, help="At most this many, one page.")]
Cursor = Annotated[str | None, typer.Option(help="The page a previous listing named as the next.")]

WATCH_EVERY_S = 0.5
"""How often ``watch`` asks for what happened since: a person sees a node's end within half a second."""


def _query(pairs: Mapping[str, Any]) -> str:
    """``?a=1&b=x&b=y`` of the pairs that are set (a list repeats its key); empty when none is."""
    flat = [(key, item) for key, value in pairs.items() for item in _set(value)]
    return f"?{urlencode(flat)}" if flat else ""


def _when(stamp: str | None) -> str:
    """A timestamp the API gave, to the second: ``2026-12-06 16:40:23``."""
    return stamp[:19].replace("T", " ") if stamp else "-"


def _resource(resource: Mapping[str, str]) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted(resource.items()))


def _print_json(answer: Any) -> None:
    sys.stdout.write(json.dumps(answer, ensure_ascii=False, indent=2) + "\n")


def _next_page(command: str, options: Mapping[str, Any], cursor: str | None) -> None:
    """The command that shows the next page, ready to copy: the same filters, and the cursor the API named
    (a cursor says where the page starts, not what it lists)."""
    if not cursor:
        return
    words = ["raydag", command]
    for option, value in options.items():
        words += [word for item in _set(value) for word in (option, str(item))]
    console.print("more: " + shlex.join([*words, "--cursor", cursor]), soft_wrap=True)


def _set(value: Any) -> list[Any]:
    """The items of an option that was given: a repeated option's each, a single one's alone, none unset."""
    return [item for item in (value if isinstance(value, list) else [value]) if item not in (None, "")]


def runs(
    status: Annotated[
        list[str] | None,
        typer.Option(
            metavar="STATUS", help="Only runs in this status (repeatable): waiting, running, completed…"
        ),
    ] = None,
    case_id: CaseId = None,
    resource: Resource = None,
    created_after: Annotated[str | None, typer.Option(help="Only runs created after this ISO time.")] = None,
    limit: Limit = 20,
    cursor: Cursor = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """The tenant's runs you may read, newest first: id, status, what about, when."""
    query = _query(
        {
            "status": status or [],
            "case_id": case_id,
            "resource": resource or [],
            "created_after": created_after,
            "limit": limit,
            "cursor": cursor,
        }
    )
    page = api_request("GET", url, f"/runs{query}", api_key)
    if as_json:
        _print_json(page)
        return
    if not page["items"]:
        console.print("no runs")
        return
    table = Table(box=None)
    table.add_column("run", no_wrap=True, min_width=36)  # whole, to copy: the other columns give way
    table.add_column("status", overflow="fold")
    table.add_column("about", overflow="fold")
    table.add_column("created", overflow="fold")
    for run in page["items"]:
        status_text = run["status"] + (f" ({run['stop_reason']})" if run["stop_reason"] else "")
        table.add_row(
            run["run_id"], status_text, escape(_resource(run["resource"])), _when(run["created_at"])
        )
    console.print(table)
    for run in page["items"]:  # the tree of agent runs, each id whole (a table column would fold them)
        if run.get("parent"):
            parent = run["parent"]
            console.print(
                f"{run['run_id']} is a child run of {parent['run_id']} (node {escape(parent['node_id'])})",
                soft_wrap=True,
            )
    filters = {
        "--status": status,
        "--case-id": case_id,
        "--resource": resource,
        "--created-after": created_after,
    }
    _next_page("runs", {**filters, "--limit": limit}, page["next"])


def inbox(
    kind: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KIND",
            help="Only decisions of this kind (repeatable): operation, review, question, tool_question.",
        ),
    ] = None,
    run: Annotated[
        list[str] | None,
        typer.Option(metavar="RUN", help="Only this run's decisions, and its child runs' (repeatable)."),
    ] = None,
    case_id: CaseId = None,
    limit: Limit = 20,
    cursor: Cursor = None,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """What waits for a person across the tenant's runs, soonest deadline first: what it is, what it would
    send, the hash a decision quotes, and the command that decides it."""
    query = _query(
        {"kind": kind or [], "run_id": run or [], "case_id": case_id, "limit": limit, "cursor": cursor}
    )
    page = api_request("GET", url, f"/decisions{query}", api_key, decides=True)  # as the decisions it prints
    if as_json:
        _print_json(page)
        return
    if not page["items"]:
        console.print("nothing waits for a person")
        return
    for number, item in enumerate(page["items"]):
        if number:
            console.print()
        for line in _decision_lines(item):
            console.print(line, soft_wrap=True)
    _next_page("inbox", {"--kind": kind, "--run": run, "--case-id": case_id, "--limit": limit}, page["next"])


def _decision_lines(item: Mapping[str, Any]) -> Iterator[str]:
    """One pending decision as a person reads it, ending with the commands that decide it (or why not)."""
    run_id = item["run_id"]
    deadline = f"decide by {_when(item['expires_at'])}" if item["expires_at"] else "no deadline"
    if item["kind"] == "operation":
        yield f"[bold]operation {item['operation_id']}[/bold]  {item['state']}  {deadline}"
        yield f"  tool      {escape(item['tool'])} (risk {item['risk']})"
        arguments = json.dumps(item["args"], ensure_ascii=False) if item["args"] is not None else "(digest)"
        yield f"  sends     {escape(arguments)}"
        yield f"  hash      {item['args_hash']}"
        quoted = f"{run_id} {item['operation_id']} --hash {item['args_hash']}"
        commands = (
            [f"raydag approvals resolve {quoted} --outcome succeeded|failed --note WHAT_YOU_CHECKED"]
            if item["state"] == "unknown"
            else [f"raydag approvals approve {quoted}", f"raydag approvals reject {quoted}"]
        )
    elif item["kind"] == "review":
        yield f"[bold]plan review, round {item['round']}[/bold]  {deadline}"
        yield f"  nodes     {escape(', '.join(item['nodes']))}"
        yield f"  hash      {item['plan_hash']}"
        quoted = f"{run_id} {item['round']} --hash {item['plan_hash']}"
        commands = [f"raydag reviews approve {quoted}", f"raydag reviews reject {quoted}"]
    elif item["kind"] == "tool_question":
        yield f"[bold]tool question {item['question_id']}[/bold]  {deadline}"
        yield f"  tool      {escape(item['tool'])} of server {escape(item['server'])}, node {escape(item['node_id'])}"
        yield f"  it says   {escape(repr(item['message']))}"  # the server's words, quoted: never raydag's
        schema = json.dumps(item["requested_schema"], ensure_ascii=False)
        yield f"  answer    a JSON object fitting {escape(schema)}"
        quoted = f"{run_id} {item['question_id']}"
        commands = [
            f"raydag questions answer-tool {quoted} --content JSON",
            f"raydag questions decline-tool {quoted}",
        ]
    else:
        yield f"[bold]question {item['number']}[/bold]  {deadline}"
        yield f"  asks      {escape(item['question'])}"
        commands = [f"raydag questions answer {run_id} {item['number']} --answer TEXT"]
    yield f"  run       {run_id} ({escape(_resource(item['resource']))}), asked by {escape(item['requested_by'])}"
    parent = item.get("parent")
    if parent:  # a child run's decision: what it serves
        root = (
            f", under run {item['root_run_id']}"
            if item.get("root_run_id") not in (None, parent["run_id"])
            else ""
        )
        yield f"  serves    run {parent['run_id']}, its agent node {escape(parent['node_id'])}{root}"
    if not item["decidable"]:
        yield "  [yellow]not yours to decide[/yellow] (your key lacks the scope, or you asked for the run)"
        return
    for command in commands:
        yield f"  [green]$[/green] {escape(command)}"


@dataclass
class _Followed:
    """A run ``watch`` follows: the watched run, or a child run of one of its agent nodes (``path``: the agent
    nodes from the watched run down to it, whose lines it is printed under, indented)."""

    run_id: str
    path: tuple[str, ...] = ()
    seen: int = 0
    ended: bool = False

    @property
    def prefix(self) -> str:
        return escape(f"{'    ' * len(self.path)}[{'/'.join(self.path)}] ") if self.path else ""


def watch(
    run_id: Annotated[str, typer.Argument(help="The run to follow.")],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Follow a run until it ends: each node's dispatch and outcome, and what it waits for while it waits; an
    agent node's child run is followed too, its lines nested under the node, to any depth. Exits as ``raydag
    run`` does: 0 completed, 3 needs a person, 1 otherwise."""
    followed, shown = [_Followed(run_id)], set[str]()
    while True:
        ended: str | None = None
        for run in followed:  # a child named here is followed in the same pass
            if run.ended:
                continue
            events = api_request("GET", url, f"/runs/{run.run_id}/events?after={run.seen}", api_key)
            for event in events:
                run.seen = event["seq"]
                line = _event_line(event)
                if line:
                    console.print(f"{_when(event['recorded_at'])[11:]}  {run.prefix}{line}", soft_wrap=True)
                if event["kind"] == "agent_started":
                    followed.append(_Followed(event["child_run_id"], (*run.path, event["node_id"])))
                if event["kind"] in {"run_waiting", "run_parked"}:
                    _print_waits(run.run_id, url, api_key, shown, run.prefix)
                if event["kind"] == "run_finished":
                    run.ended = True
                    ended = event["status"] if not run.path else ended
        if ended is not None:
            raise typer.Exit(status_exit_code(ended))
        time.sleep(WATCH_EVERY_S)


def _print_waits(
    run_id: str, url: str | None, api_key: str | None, shown: set[str], prefix: str = ""
) -> None:
    """What the run waits for now, each named once while the watch lasts."""
    run = api_request("GET", url, f"/runs/{run_id}", api_key)
    for item in run.get("waiting_for") or ():
        what = waited_for(item, run_id)
        if what in shown:
            continue
        shown.add(what)
        deadline = f", decide by {_when(item['expires_at'])}" if item["expires_at"] else ""
        console.print(
            f"          {prefix}waits for {escape(what)}{deadline} (see `raydag inbox --run {run_id}`)",
            soft_wrap=True,
        )


def _event_line(event: Mapping[str, Any]) -> str | None:
    """One event as a line of the run's progress; ``None`` for the bookkeeping a person need not follow."""
    kind = event["kind"]
    node = event.get("node_id")
    if kind == "run_created":
        return f"run created ({escape(_resource(event.get('resource') or {}))})"
    if kind == "plan_accepted":
        return f"plan accepted: {len(event.get('plan', {}).get('nodes', []))} nodes"
    if kind == "node_dispatched":
        attempt = event.get("attempt", 1)
        what = event["tool"] or "agent"  # an agent node calls no tool: its child run follows
        return f"{node}  {what} started" + (f" (attempt {attempt})" if attempt > 1 else "")
    if kind == "node_succeeded":
        return f"{node}  succeeded"
    if kind == "node_failed":
        error = event.get("error") or {}
        return f"{node}  [red]failed[/red] {error.get('code', '')}: {escape(str(error.get('message', '')))}"
    if kind == "node_denied":
        decision = event.get("decision") or {}
        return f"{node}  [red]denied[/red] by {decision.get('rule_id')}: {escape(str(decision.get('reason', '')))}"
    if kind == "node_skipped":
        return f"{node}  skipped"
    if kind == "node_task_updated":
        task = event.get("task") or {}
        said = f": the server says {escape(repr(task['message']))}" if task.get("message") else ""
        asks = task.get("question") or {}
        if asks.get("message"):
            said += f"; it asks a person {escape(repr(asks['message']))} (see `raydag inbox`)"
        return f"{node}  task {escape(str(task.get('task_id')))} {escape(str(task.get('status')))}{said}"
    if kind == "node_retry_scheduled":
        return f"{node}  retry scheduled"
    if kind == "node_reused":
        return f"{node}  reused from the run it continues"
    if kind == "agent_started":
        return f"{node}  agent: child run {event['child_run_id']} (followed below)"
    if kind == "agent_ended":
        return f"{node}  child run {event['child_run_id']} ended {event['status']}"
    if kind == "run_waiting":
        return f"[yellow]waiting for a person[/yellow]: {escape(event.get('reason', ''))}"
    if kind == "plan_review_requested":
        return f"[yellow]plan waits for review[/yellow] (round {event.get('round')})"
    if kind == "question_asked":
        return f"[yellow]planner asks[/yellow] (question {event.get('number')}): {escape(str(event.get('text', '')))}"
    if kind in {"run_woken", "run_resumed", "plan_reviewed", "question_answered"}:
        return str(kind).replace("_", " ")
    if kind == "run_finished":
        if not event.get("stop_reason"):
            return f"run {event['status']}"
        return f"run {event['status']} ({event['stop_reason']}: {escape(str(event.get('detail') or ''))})"
    return None

"""``raydag approvals``: a person's decisions on a run's writes, through the HTTP API of a running raydag.

``list`` shows what a run wants to write and what waits; ``approve`` and ``reject`` quote the hash of the exact
arguments ``list`` showed; ``resolve`` settles an outcome nobody could confirm. The API key must grant
``runs:approve`` (docs/EFFECTS.md). Exit codes: 0 done, 2 refused (the problem is printed), 1 the API could not
be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from actors.cli.client import DEFAULT_URL, api_request
from actors.cli.report import console_for

approvals = typer.Typer(
    help="List and decide a run's writes (operations) through the HTTP API.", no_args_is_help=True
)
console = console_for()

RunId = Annotated[str, typer.Argument(help="The run.")]
OperationId = Annotated[str, typer.Argument(help="The operation, as `raydag approvals list` shows it.")]
ArgsHash = Annotated[
    str, typer.Option("--hash", help="The operation's args_hash, as listed: a decision on exact arguments.")
]
Note = Annotated[str | None, typer.Option(help="Why; recorded with the decision.")]
Url = Annotated[
    str | None,
    typer.Option(
        envvar="RAYDAG_URL",
        help="The raydag API. [default: the raydag serving this RAYDAG_HOME (raydag up, raydag serve), else "
        f"{DEFAULT_URL}]",
        show_default=False,
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(envvar="RAYDAG_API_KEY", help="An API key of the run's tenant.", show_default=False),
]


@approvals.command("list")
def list_operations(
    run_id: RunId,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the operations as JSON.")] = False,
) -> None:
    """The run's writes: tool, state, arguments and the hash a decision quotes."""
    listed = api_request("GET", url, f"/runs/{run_id}/operations", api_key)
    if as_json:
        sys.stdout.write(json.dumps(listed, ensure_ascii=False, indent=2) + "\n")
        return
    if not listed:
        console.print(f"run {run_id} has no operations")
        return
    for number, operation in enumerate(listed):
        if number:
            console.print()
        for line in operation_lines(operation):
            console.print(line, soft_wrap=True)


def operation_lines(operation: dict[str, Any]) -> list[str]:
    """One operation as a person reads it: every id and hash whole, to copy into the decision that quotes it."""
    arguments = (
        json.dumps(operation["args"], ensure_ascii=False) if operation["args"] is not None else "(digest)"
    )
    sharers = len(operation.get("runs") or ()) or 1  # more than one: the intent is shared
    return [
        f"[bold]operation {operation['operation_id']}[/bold]  {operation['state']}",
        f"  tool      {escape(operation['tool'])} (risk {operation['risk']}, approval {operation['approval']})",
        f"  sends     {escape(arguments)}",
        f"  hash      {operation['args_hash']}",
        f"  runs      {sharers}" + (" (one intent, shared)" if sharers > 1 else ""),
    ]


def _decided(operation: dict[str, Any]) -> None:
    last = operation["history"][-1] if operation["history"] else {}
    console.print(
        f"operation {operation['operation_id']} ({operation['tool']}) is {operation['state']}"
        + (f", by {last['actor']}" if last else "")
    )


def _decide(
    verb: str,
    run_id: str,
    operation_id: str,
    args_hash: str,
    note: str | None,
    url: str | None,
    key: str | None,
) -> None:
    body = {"args_hash": args_hash, "note": note}
    _decided(
        api_request("POST", url, f"/runs/{run_id}/operations/{operation_id}/{verb}", key, body, decides=True)
    )


@approvals.command()
def approve(
    run_id: RunId,
    operation_id: OperationId,
    args_hash: ArgsHash,
    note: Note = None,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Approve an operation's exact arguments: the run executes it once."""
    _decide("approve", run_id, operation_id, args_hash, note, url, api_key)


@approvals.command()
def reject(
    run_id: RunId,
    operation_id: OperationId,
    args_hash: ArgsHash,
    note: Note = None,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Reject an operation: it never executes."""
    _decide("reject", run_id, operation_id, args_hash, note, url, api_key)


@approvals.command()
def resolve(
    run_id: RunId,
    operation_id: OperationId,
    args_hash: ArgsHash,
    outcome: Annotated[str, typer.Option(help="What you found the write did: succeeded or failed.")],
    note: Annotated[str, typer.Option(help="What you checked, and how (required).")],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Settle an operation whose outcome is unknown with what you found."""
    body = {"args_hash": args_hash, "outcome": outcome, "note": note}
    path = f"/runs/{run_id}/operations/{operation_id}/resolve"
    _decided(api_request("POST", url, path, api_key, body, decides=True))

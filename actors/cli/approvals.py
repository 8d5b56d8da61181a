"""``raydag approvals``: a person's decisions on a run's writes, through the HTTP API of a running raydag.

``list`` shows what a run wants to write and what waits; ``approve`` and ``reject`` quote the hash of the exact
arguments ``list`` showed; ``resolve`` settles an outcome nobody could confirm. The API key must grant
``runs:approve`` (docs/EFFECTS.md). Exit codes: 0 done, 2 refused (the problem is printed), 1 the API could not
be reached.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Collection, Mapping
from typing import Annotated, Any

import typer
from rich.markup import escape

from actors.cli.problems import problem
from actors.cli.report import EXIT_BAD_INPUT, EXIT_RUN_FAILED, console_for

approvals = typer.Typer(
    help="List and decide a run's writes (operations) through the HTTP API.", no_args_is_help=True
)
console = console_for()
errors = console_for(stderr=True)

RunId = Annotated[str, typer.Argument(help="The run.")]
OperationId = Annotated[str, typer.Argument(help="The operation, as `raydag approvals list` shows it.")]
ArgsHash = Annotated[
    str, typer.Option("--hash", help="The operation's args_hash, as listed: a decision on exact arguments.")
]
Note = Annotated[str | None, typer.Option(help="Why; recorded with the decision.")]
Url = Annotated[str, typer.Option(envvar="RAYDAG_URL", help="The raydag API.")]
ApiKey = Annotated[
    str | None,
    typer.Option(envvar="RAYDAG_API_KEY", help="An API key of the run's tenant.", show_default=False),
]
DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 60
URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
"""What a URL keeps as it is; anything else (a space in a run id typed by hand) is percent-encoded, as httpx
does, so that the API answers it (404) rather than the request failing here."""


def api_request(
    method: str,
    url: str,
    path: str,
    api_key: str | None,
    body: Any = None,
    *,
    retryable: Collection[int] = (),
    headers: Mapping[str, str] | None = None,
) -> Any:
    """The API's JSON answer to one request; a refusal or an unreachable API is printed and exits: 2 for a
    refusal the request must change to avoid, 1 for a 5xx, an unreachable API, or a ``retryable`` status. A
    refusal is printed whole: its detail, then each field at fault and each member the API adds (``known``…)."""
    from http.client import HTTPException  # here: it imports ssl, which a command's start need not pay for

    if not api_key:
        errors.print("an API key is needed: --api-key or RAYDAG_API_KEY")
        raise typer.Exit(EXIT_BAD_INPUT)
    try:
        status, content = _exchange(
            method,
            f"{url.rstrip('/')}{path}",
            body,
            {**(headers or {}), "Authorization": f"Bearer {api_key}"},
        )
    except (OSError, HTTPException, ValueError) as exc:  # urllib's URLError is an OSError
        errors.print(f"[red]cannot reach {escape(url)}:[/red] {escape(str(getattr(exc, 'reason', exc)))}")
        raise typer.Exit(EXIT_RUN_FAILED) from None
    try:
        answer = json.loads(content)
    except ValueError:
        answer = {"title": str(status), "detail": content[:500].decode("utf-8", errors="replace")}
    if status >= 400:
        refused = problem(
            answer if isinstance(answer, dict) else {"detail": str(answer)},
            status=status,
            retry=status in retryable,
        )
        errors.print(refused.text)
        raise typer.Exit(refused.exit_code)
    return answer


def _exchange(method: str, url: str, body: Any, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """One request's status and content, over the standard library: httpx costs a command ~50 ms more to
    import, and a command makes a few requests at most (``raydag batch --url``, which makes many at once, keeps
    an httpx client). A proxy is used as the environment names one, as httpx would."""
    import urllib.error
    import urllib.parse
    import urllib.request

    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        urllib.parse.quote(url, safe=URL_SAFE),
        data=data,
        method=method,
        headers={**headers, **({"Content-Type": "application/json"} if data is not None else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as refused:  # an answer, 4xx or 5xx: the caller reads it
        with refused:
            return int(refused.code), bytes(refused.read())


@approvals.command("list")
def list_operations(
    run_id: RunId,
    url: Url = DEFAULT_URL,
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
    verb: str, run_id: str, operation_id: str, args_hash: str, note: str | None, url: str, key: str | None
) -> None:
    body = {"args_hash": args_hash, "note": note}
    _decided(api_request("POST", url, f"/runs/{run_id}/operations/{operation_id}/{verb}", key, body))


@approvals.command()
def approve(
    run_id: RunId,
    operation_id: OperationId,
    args_hash: ArgsHash,
    note: Note = None,
    url: Url = DEFAULT_URL,
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
    url: Url = DEFAULT_URL,
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
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Settle an operation whose outcome is unknown with what you found."""
    body = {"args_hash": args_hash, "outcome": outcome, "note": note}
    _decided(api_request("POST", url, f"/runs/{run_id}/operations/{operation_id}/resolve", api_key, body))

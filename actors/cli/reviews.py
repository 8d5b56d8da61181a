"""``raydag reviews``: a person's yes or no to a run's plan, through the HTTP API of a running raydag.

``list`` shows each round's plan put to review, its hash and what it waits on; ``approve`` and ``reject`` quote
the hash ``list`` showed. The API key must grant ``runs:review`` (docs/PEOPLE.md). Exit codes: 0 done, 2
refused (the problem is printed), 1 the API could not be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from actors.cli.approvals import ApiKey, Note, RunId, Url
from actors.cli.client import api_request
from actors.cli.report import console_for

reviews = typer.Typer(
    help="List and decide a run's plans put to review, through the HTTP API.", no_args_is_help=True
)
console = console_for()

Round = Annotated[int, typer.Argument(min=1, help="The round whose plan is decided, as listed.")]
PlanHash = Annotated[
    str, typer.Option("--hash", help="The plan's plan_hash, as listed: a decision on that exact plan.")
]


@reviews.command("list")
def list_reviews(
    run_id: RunId,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the reviews, plans included, as JSON.")
    ] = False,
) -> None:
    """The run's plans put to review: round, state, the nodes waiting on it, and the hash a decision quotes."""
    listed = api_request("GET", url, f"/runs/{run_id}/reviews", api_key)
    if as_json:
        sys.stdout.write(json.dumps(listed, ensure_ascii=False, indent=2) + "\n")
        return
    if not listed:
        console.print(f"run {run_id} has no plan put to review")
        return
    for review in listed:  # a block each: the hash stays whole, whatever the terminal's width
        tools = sorted({node["tool"] for node in review["plan"]["nodes"]})
        decided = f", by {review['decided_by']}" if review["decided_by"] else ""
        console.print(f"round {review['round']}: {review['state']}{escape(decided)}")
        console.print(f"  plan_hash {review['plan_hash']}", soft_wrap=True)
        console.print(f"  new nodes {escape(', '.join(review['nodes']))}", soft_wrap=True)
        console.print(f"  tools     {escape(', '.join(tools))}", soft_wrap=True)


def _decide(
    verb: str,
    run_id: str,
    round_number: int,
    plan_hash: str,
    note: str | None,
    url: str | None,
    key: str | None,
) -> None:
    body = {"plan_hash": plan_hash, "note": note}
    review: dict[str, Any] = api_request(
        "POST", url, f"/runs/{run_id}/reviews/{round_number}/{verb}", key, body, decides=True
    )
    console.print(f"round {review['round']}'s plan is {review['state']}, by {review['decided_by']}")


@reviews.command()
def approve(
    run_id: RunId,
    round_number: Round,
    plan_hash: PlanHash,
    note: Note = None,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Approve a round's exact plan: the run dispatches it."""
    _decide("approve", run_id, round_number, plan_hash, note, url, api_key)


@reviews.command()
def reject(
    run_id: RunId,
    round_number: Round,
    plan_hash: PlanHash,
    note: Note = None,
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Reject a round's plan: nothing of it runs, and the run stops PLAN_REJECTED."""
    _decide("reject", run_id, round_number, plan_hash, note, url, api_key)

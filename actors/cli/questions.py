"""``raydag questions``: what a run's planner asked a person, and a person's answer, through the HTTP API.

``list`` shows each question and what became of it; ``answer`` answers one (the planner is shown the answer
with its author, never as authority). The API key must grant ``runs:answer`` to answer (docs/PEOPLE.md).
Exit codes: 0 done, 2 refused (the problem is printed), 1 the API could not be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from actors.cli.approvals import DEFAULT_URL, ApiKey, RunId, Url, api_request
from actors.cli.report import console_for

questions = typer.Typer(
    help="List and answer a run planner's questions, through the HTTP API.", no_args_is_help=True
)
console = console_for()


@questions.command("list")
def list_questions(
    run_id: RunId,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the questions as JSON.")] = False,
) -> None:
    """The run's questions, in order: number, state, the question, and its answer and author."""
    listed = api_request("GET", url, f"/runs/{run_id}/questions", api_key)
    if as_json:
        sys.stdout.write(json.dumps(listed, ensure_ascii=False, indent=2) + "\n")
        return
    if not listed:
        console.print(f"run {run_id}'s planner asked nothing")
        return
    for question in listed:
        console.print(f"question {question['number']}: {question['state']}")
        console.print(f"  asked     {escape(question['question'])}", soft_wrap=True)
        if question["answer"] is not None:
            console.print(
                f"  answered  {escape(question['answer'])} ({escape(question['answered_by'])})",
                soft_wrap=True,
            )


@questions.command()
def answer(
    run_id: RunId,
    number: Annotated[int, typer.Argument(min=1, help="The question's number, as listed.")],
    text: Annotated[str, typer.Option("--answer", help="What the planner is told.")],
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Answer the planner's question: it plans again, shown the answer and who gave it."""
    answered: dict[str, Any] = api_request(
        "POST", url, f"/runs/{run_id}/questions/{number}/answer", api_key, {"answer": text}
    )
    console.print(f"question {answered['number']} is {answered['state']}, by {answered['answered_by']}")

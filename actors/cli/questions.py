"""``raydag questions``: what a run's planner and its tools asked a person, and a person's answer, through the
HTTP API.

``list`` shows each question and what became of it; ``answer`` answers a planner's (the planner is shown the
answer with its author, never as authority); ``answer-tool`` answers a tool's with a JSON object that must fit
the schema the tool asked for, and ``decline-tool`` declines it (the tool decides what follows). The API key
must grant ``runs:answer`` to answer (docs/PEOPLE.md).
Exit codes: 0 done, 2 refused (the problem is printed), 1 the API could not be reached.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape

from actors.cli.approvals import ApiKey, RunId, Url
from actors.cli.client import api_request
from actors.cli.report import EXIT_BAD_INPUT, console_for

questions = typer.Typer(
    help="List and answer what a run's planner and tools asked, through the HTTP API.", no_args_is_help=True
)
console = console_for()
errors = console_for(stderr=True)


@questions.command("list")
def list_questions(
    run_id: RunId,
    url: Url = None,
    api_key: ApiKey = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the questions as JSON.")] = False,
) -> None:
    """The run's questions, in order: its planner's (number, state, the question, its answer and author), then
    its tools' (id, tool, the server's words, the answer sent and who gave it)."""
    listed = api_request("GET", url, f"/runs/{run_id}/questions", api_key)
    tools = api_request("GET", url, f"/runs/{run_id}/tool-questions", api_key)
    if as_json:
        sys.stdout.write(json.dumps({"planner": listed, "tools": tools}, ensure_ascii=False, indent=2) + "\n")
        return
    if not listed and not tools:
        console.print(f"run {run_id}'s planner and tools asked nothing")
        return
    for question in listed:
        console.print(f"question {question['number']}: {question['state']}")
        console.print(f"  asked     {escape(question['question'])}", soft_wrap=True)
        if question["answer"] is not None:
            console.print(
                f"  answered  {escape(question['answer'])} ({escape(question['answered_by'])})",
                soft_wrap=True,
            )
    for question in tools:
        console.print(f"tool question {question['question_id']}: {question['state']}")
        console.print(
            f"  {escape(question['tool'])} ({escape(question['node_id'])}) asks {escape(repr(question['message']))}",
            soft_wrap=True,
        )
        if question["content"] is not None:
            content = json.dumps(question["content"], ensure_ascii=False)
            console.print(f"  answered  {escape(content)} ({escape(question['decided_by'])})", soft_wrap=True)


@questions.command()
def answer(
    run_id: RunId,
    number: Annotated[int, typer.Argument(min=1, help="The question's number, as listed.")],
    text: Annotated[str, typer.Option("--answer", help="What the planner is told.")],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Answer the planner's question: it plans again, shown the answer and who gave it."""
    answered: dict[str, Any] = api_request(
        "POST", url, f"/runs/{run_id}/questions/{number}/answer", api_key, {"answer": text}, decides=True
    )
    console.print(f"question {answered['number']} is {answered['state']}, by {answered['answered_by']}")


@questions.command("answer-tool")
def answer_tool(
    run_id: RunId,
    question_id: Annotated[str, typer.Argument(help="The tool question's id, as `raydag inbox` lists it.")],
    content: Annotated[
        str,
        typer.Option("--content", help="The answer: a JSON object fitting the schema the tool asked for."),
    ],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Answer a tool's question: the answer is sent to the tool, and its call goes on."""
    try:
        parsed = json.loads(content)
    except json.JSONDecodeError as exc:
        errors.print(f"[red]--content is not JSON[/red]: {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT) from None
    if not isinstance(parsed, dict):
        errors.print("[red]--content must be a JSON object[/red], as the tool's schema asks", soft_wrap=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    answered: dict[str, Any] = api_request(
        "POST",
        url,
        f"/runs/{run_id}/tool-questions/{question_id}/answer",
        api_key,
        {"content": parsed},
        decides=True,
    )
    console.print(
        f"tool question {answered['question_id']} is {answered['state']}, by {answered['decided_by']}"
    )


@questions.command("decline-tool")
def decline_tool(
    run_id: RunId,
    question_id: Annotated[str, typer.Argument(help="The tool question's id, as `raydag inbox` lists it.")],
    url: Url = None,
    api_key: ApiKey = None,
) -> None:
    """Decline a tool's question: the tool is told no answer will come, and decides what follows."""
    declined: dict[str, Any] = api_request(
        "POST", url, f"/runs/{run_id}/tool-questions/{question_id}/decline", api_key, decides=True
    )
    console.print(
        f"tool question {declined['question_id']} is {declined['state']}, by {declined['decided_by']}"
    )

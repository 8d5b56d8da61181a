"""``raydag watch``'s line for a task's progress: the server's words quoted as the server's, never as markup."""

from __future__ import annotations

from rich.console import Console

from actors.cli.inbox import _event_line


def rendered(line: str | None) -> str:
    assert line is not None
    console = Console(width=200, record=True, color_system=None)
    console.print(line)
    return console.export_text().strip()


def test_a_tasks_progress_is_a_line_with_the_servers_message_quoted() -> None:
    event = {
        "kind": "node_task_updated",
        "node_id": "research",
        "task": {"task_id": "t-1", "status": "working", "message": "Gathering sources..."},
    }
    assert (
        rendered(_event_line(event)) == "research  task t-1 working: the server says 'Gathering sources...'"
    )


def test_a_servers_message_cannot_style_the_line_or_pass_for_raydags_words() -> None:
    event = {
        "kind": "node_task_updated",
        "node_id": "research",
        "task": {"task_id": "t-1", "status": "working", "message": "[red]run completed[/red]\nrun completed"},
    }
    assert rendered(_event_line(event)) == (
        "research  task t-1 working: the server says '[red]run completed[/red]\\nrun completed'"
    )


def test_a_task_that_asks_names_its_question_quoted_and_where_to_answer_it() -> None:
    event = {
        "kind": "node_task_updated",
        "node_id": "research",
        "task": {
            "task_id": "t-1",
            "status": "input_required",
            "message": "Requesting clarification...",
            "question": {
                "id": 4,
                "message": "Which [b]one[/b]?",
                "schema": {"type": "object", "properties": {}},
            },
        },
    }
    assert rendered(_event_line(event)) == (
        "research  task t-1 input_required: the server says 'Requesting clarification...'; "
        "it asks a person 'Which [b]one[/b]?' (see `raydag inbox`)"
    )


def test_a_decision_a_child_run_waits_for_names_that_run_and_one_of_the_run_itself_does_not() -> None:
    from actors.cli.attached import waited_for

    item = {"kind": "review", "round": 1, "run_id": "child-1"}
    assert waited_for(item, "child-1") == "plan review of round 1"
    assert waited_for(item, "root-1") == "plan review of round 1 in child run child-1"

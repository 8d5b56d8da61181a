"""``raydag demo --act``: the write path end to end at one terminal. The toolsets' acting demo proposes a write;
the person at the terminal is shown it whole (the tool, the arguments it will send, their hash) and approves
or rejects it as the development approver; the run goes on and the write is executed once, or never.

The decision is made where the API makes it (``Decisions``, over the run store): the same scope, the same
hash quoted, the same ledger; only the key is the development approver's (docs/CONFIGURATION.md).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape

from actors.cli.approvals import operation_lines
from actors.cli.report import EXIT_NEEDS_HUMAN

if TYPE_CHECKING:
    from actors.run.approvals import Verdict

DEMO_APPROVER = "dev-approver"
"""Who decides at the terminal: the development approver of the demo tenant (``dev-key-approver``)."""


class Approver:
    """Asks the person at the terminal about each write of a run that waits for approval, once each, and
    decides it as they say (``approve_all``: yes to each, unasked)."""

    def __init__(self, runtime: Any, tenant: str, console: Console, *, approve_all: bool) -> None:
        self._runtime = runtime
        self._tenant = tenant
        self._console = console
        self._approve_all = approve_all
        self._asked: set[str] = set()

    def __call__(self, run_id: str) -> None:
        """Decide each write of ``run_id`` that waits for approval and was not asked about yet."""
        for operation in self._awaiting(run_id):
            self._asked.add(operation["operation_id"])
            self._console.print()
            self._console.print("[yellow]the run waits for a person to approve a write:[/yellow]")
            for line in operation_lines(operation):
                self._console.print(line, soft_wrap=True)
            verdict: Verdict = "approve" if self._approve_all or self._ask() else "reject"
            moved = asyncio.run(self._decide(run_id, operation, verdict))
            self._console.print(f"operation {moved['operation_id']} is {moved['state']}, by {DEMO_APPROVER}")
            self._console.print()

    def _ask(self) -> bool:
        try:
            answer = self._console.input(escape(f"approve it as {DEMO_APPROVER}? [y/N] "))
        except EOFError:  # nobody at the terminal: the write stays waiting, and the command says so
            self._console.print("\nno answer: the write still waits for a person")
            raise typer.Exit(EXIT_NEEDS_HUMAN) from None
        return answer.strip().lower() in {"y", "yes"}

    def _awaiting(self, run_id: str) -> list[dict[str, Any]]:
        return [
            operation
            for operation in self.writes(run_id)
            if operation["state"] == "awaiting_approval" and operation["operation_id"] not in self._asked
        ]

    def writes(self, run_id: str) -> list[dict[str, Any]]:
        """Every write of ``run_id``, as ``raydag approvals list`` shows them."""

        async def read() -> list[dict[str, Any]]:
            from actors.api.operations import listed
            from actors.api.views import as_json
            from actors.launch.desk import decisions_desk

            async with decisions_desk(self._runtime.dsn, self._runtime.settings) as desk:
                return [as_json(view) for view in await listed(desk.operations, run_id)]

        return asyncio.run(read())

    async def _decide(self, run_id: str, operation: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
        from actors.api.operations import shown
        from actors.api.views import as_json
        from actors.launch.desk import decisions_desk
        from actors.run.approvals import DECISION_SCOPES
        from dag.policy import Principal

        decider = Principal(self._tenant, DEMO_APPROVER, self._runtime.toolsets.scopes | DECISION_SCOPES)
        async with decisions_desk(self._runtime.dsn, self._runtime.settings) as desk:
            moved = await desk.decide_operation(
                decider,
                run_id,
                operation["operation_id"],
                verdict,
                quoted_hash=operation["args_hash"],
                note="decided at the terminal by raydag demo --act",
            )
            shown_as: dict[str, Any] = as_json(await shown(desk.operations, moved))
        return shown_as


def print_writes(console: Console, operations: list[dict[str, Any]]) -> None:
    """What became of each write of the run: its state, who decided it, how many times it was executed."""
    for operation in operations:
        deciders = [move["actor"] for move in operation["history"] if move["actor"].startswith("person:")]
        console.print(
            f"write {escape(operation['tool'])}: {operation['state']}"
            + (f", decided by {deciders[-1]}" if deciders else "")
            + f", executed {operation['attempts']} time{'s' if operation['attempts'] != 1 else ''}"
            + (f" (one intent, shared by {len(operation['runs'])} runs)" if operation["shared"] else ""),
            soft_wrap=True,
        )

"""docs/PLANNERS.md's example of a planner that asks, run as written."""

from __future__ import annotations

import re
import types

from dag.events import ErrorKind, NodeError
from dag.states import NodeStatus
from planner.base import Answered, Final, Observation, PlanningContext, Question
from tests.conftest import REPO


def example_planner() -> type:
    text = (REPO / "docs" / "PLANNERS.md").read_text(encoding="utf-8")
    section = text[text.index("## Writing a planner, one that asks") :]
    [code] = re.findall(r"```python\n(.*?)```", section[: section.index("\n## ", 3)], flags=re.DOTALL)
    module = types.ModuleType("docs_planner")
    exec(compile(code, "docs/PLANNERS.md", "exec"), module.__dict__)  # the project's own docs
    planner: type = module.WhichFilePlanner
    return planner


async def test_the_documented_planner_asks_until_an_answer_names_a_file_then_reads_it() -> None:
    planner = example_planner()()
    context = PlanningContext(resource={"root": "/srv"}, goal="summarize a report", tools=[])

    first = await planner.propose(context)
    vague = await planner.propose(
        PlanningContext(
            resource={"root": "/srv"},
            goal="g",
            tools=[],
            answers=[Answered("Which file should I read? Give its path.", "the big one", "person:t/alice")],
        )
    )
    told = PlanningContext(
        resource={"root": "/srv"},
        goal="g",
        tools=[],
        answers=[Answered("Which file should I read?", "read /srv/q3.txt please", "person:t/alice")],
    )
    plan = await planner.propose(told)
    read = Observation("read", "read_text_file", {"path": "/srv/q3.txt"}, NodeStatus.SUCCEEDED, {"text": "x"})
    failed = Observation(
        "other",
        "read_text_file",
        {"path": "/x.txt"},
        NodeStatus.FAILED,
        error=NodeError(kind=ErrorKind.BUSINESS, code="E", message="m"),
    )
    decision = await planner.decide(told, [read, failed])

    assert planner.name == "which-file"
    assert isinstance(first, Question)
    assert isinstance(vague, Question)  # an answer naming no file: asked again
    assert plan == {"nodes": [{"id": "read", "tool": "read_text_file", "args": {"path": "/srv/q3.txt"}}]}
    assert decision == Final({"read": ["/srv/q3.txt"], "asked_by": "person:t/alice"}, citations=[])

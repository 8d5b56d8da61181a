"""The run report's words for a plan's nodes."""

from __future__ import annotations

from actors.cli.report import agent_body
from dag.plan import AgentSpec


def test_an_agent_node_is_named_for_what_it_runs() -> None:
    loop = AgentSpec.model_validate({"goal": "g", "loop": {"max_steps": 4}})
    named = AgentSpec.model_validate({"goal": "g", "planner": "conformance"})
    given = AgentSpec.model_validate({"goal": "g", "plan": {"nodes": [{"id": "a", "tool": "t"}]}})

    stored = [
        agent.model_dump(mode="json", by_alias=True, exclude_defaults=True) for agent in (loop, named, given)
    ]
    assert [agent_body(agent) for agent in stored] == [
        "a model loop of at most 4 steps",
        "conformance",
        "its own plan",
    ]

"""A final answer may cite only what the run observed: every citation must appear in one of its tool outputs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dag.run_state import RunState


def observed_strings(state: RunState) -> frozenset[str]:
    """Every string value in the outputs of the run's nodes that produced one."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    for node in state.nodes.values():
        if node.status.has_output and not node.is_group:
            walk(node.output)
    return frozenset(found)


def unsupported_citations(citations: Iterable[str], state: RunState) -> list[str]:
    """The citations (evidence refs, document codes, ids) no tool output of this run contains, sorted."""
    observed = observed_strings(state)
    return sorted({citation for citation in citations if citation not in observed})

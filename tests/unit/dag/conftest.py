"""Fixtures shared by the tests of the pure core ``dag``."""

from __future__ import annotations

from typing import Any

import pytest
from dag_run_builders import CASE_ID

from dag.contracts import ToolCatalogue
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.planner import document_check_plan


@pytest.fixture
def catalogue() -> ToolCatalogue:
    """The caseops tools: a realistic catalogue with case-bound, pattern-checked, closed input schemas."""
    return CASEOPS_TOOLS


@pytest.fixture
def example_plan() -> dict[str, Any]:
    """The conformance planner's document check: three independent reads, then one resolve per document."""
    return document_check_plan(CASE_ID)

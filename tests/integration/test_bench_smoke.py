"""Every benchmark under ``bench/`` runs in smoke mode — one tiny sample each, all on one Ray — so none can rot
unnoticed. What is checked is that each ran to its end and printed its tables with numbers in them; never what
the numbers are (a smoke run's timings mean nothing)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from bench.__main__ import BENCHMARKS
from tests.conftest import TEST_HOME
from tests.integration.smoke_run import SMOKE_LIMIT_S, run_smoke

pytestmark = pytest.mark.timeout(SMOKE_LIMIT_S + 60)  # the whole run happens in the first test's fixture

TABLES = {
    "c102": ["Warm C-102 latency"],
    "demo": ["`raydag demo` wall time"],
    "cold-start": ["Cold start: the first run on a new supervisor"],
    "parallel": ["Parallel efficiency: makespan", "CPU per node, by process"],
    "control-plane": ["Control plane, chain of", "Control plane, lattice"],
    "large-outputs": ["Large outputs"],
    "storage": ["Bytes stored per node"],
    "mcp": ["MCP tool-call latency", "Server throughput", "Tool server CPU per call"],
    "load": ["Load through Serve", "Where a run's time goes under load", "CPU by process while loaded"],
    "serve-parallel": ["Parallel efficiency through Serve"],
    "streaming": ["Streamed plans"],
    "batch": ["Batch of wide cases through one supervisor"],
    "shipped-cpu": ["Shipped runtime, CPU per node by process"],
    "layer": ["A layer's timeline"],
    "effects": ["A write beside a read", "Appends per run, by arm"],
    "waiting": ["Runs waiting for a person"],
    "long-tasks": ["Long tool calls"],
    "agents": ["Sub-agents:"],
    "cli": ["The command's start", "`raydag run C-102`: attached"],
    "scale": [
        "Scale: supervisors side by side",
        "Scale: admission and the start of a run",
        "Scale: a wide DAG",
    ],
}
"""The headings of the tables each benchmark prints (the start of each ``### `` line)."""


@pytest.fixture(scope="module")
def smoke_output(admin_dsn: str) -> str:
    """What ``python -m bench --smoke`` printed: every benchmark, each on a database of its own on the test
    server."""
    completed = run_smoke(admin_dsn, TEST_HOME / "bench-smoke")
    assert completed.returncode == 0, f"{completed.stdout[-2000:]}\n{completed.stderr[-6000:]}"
    return completed.stdout


def tables(output: str) -> dict[str, list[str]]:
    """Each ``### `` heading of the output → the data rows of the Markdown table under it."""
    found: dict[str, list[str]] = {}
    rows: list[str] = []
    for line in output.splitlines():
        if line.startswith("### "):
            rows = found.setdefault(line.removeprefix("### "), [])
        elif line.startswith("|") and not line.startswith("|---"):
            rows.append(line)
    return {heading: lines[1:] for heading, lines in found.items()}  # lines[0] is the table's header


def test_the_smoke_test_knows_every_benchmark() -> None:
    assert sorted(TABLES) == sorted(BENCHMARKS)


@pytest.mark.parametrize("name", list(TABLES))
def test_the_benchmark_ran_and_printed_its_tables_with_numbers(smoke_output: str, name: str) -> None:
    printed = tables(smoke_output)

    for start in TABLES[name]:
        [heading] = [heading for heading in printed if heading.startswith(start)]
        rows = printed[heading]
        assert rows, f"{heading!r} has no rows"
        for row in rows:
            cells = [cell.strip() for cell in row.strip("|").split("|")[1:]]
            assert any(re.fullmatch(r"[\d,.]+( / [\d,.]+)?", cell) for cell in cells), row


def test_the_parallel_benchmark_says_whether_it_ran_langgraph(smoke_output: str) -> None:
    # The LangGraph arm needs the `bench` extra, which `make test` does not install: a smoke run without it
    # says it left the arm out, rather than leaving it out silently.
    skipped = "- LangGraph: not run (smoke run without the `bench` extra" in smoke_output
    assert skipped is (importlib.util.find_spec("langgraph") is None)

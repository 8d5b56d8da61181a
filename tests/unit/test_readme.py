"""The examples and reference tables of the README and docs/ are checked against the code, so they cannot rot.

Each test reads the document that holds its example or table now: the front page keeps the first screen, the
two commands and the tour; the reference lives in docs/."""

from __future__ import annotations

import json
import re
import shlex

from pydantic import AliasChoices

from actors.launch.settings import Settings
from dag.budget import Budgets
from dag.plan import Plan
from dag.states import StopReason
from dag.validate import validate_plan
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.planner import document_check_plan
from mcp_server.seed import SeedData
from tests.conftest import REPO


def document(path: str) -> str:
    return (REPO / path).read_text(encoding="utf-8")


README = document("README.md")
API = document("docs/API.md")
CONFIGURATION = document("docs/CONFIGURATION.md")
CONTROL_PLANE = document("docs/CONTROL-PLANE.md")
CASEOPS = document("docs/CASEOPS.md")
METRICS = document("docs/METRICS.md")


def section(title: str, text: str = README) -> str:
    """The section of ``text`` under the heading ``title`` (any level), up to the next heading of its level
    or above."""
    found = re.search(rf"^(#+) {re.escape(title)}\n", text, flags=re.MULTILINE)
    assert found is not None, f"no heading {title!r}"
    level = len(found.group(1))
    after = re.search(rf"^#{{1,{level}}} ", text[found.end() :], flags=re.MULTILINE)
    return text[found.start() : found.end() + after.start() if after else None]


def blocks(language: str, text: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def json_blocks(text: str) -> list[object]:
    return [json.loads(block) for block in blocks("json", text)]


def test_the_plan_example_is_the_conformance_plan_and_is_valid() -> None:
    plan = json_blocks(section("The plan format", CONTROL_PLANE))[0]

    assert plan == document_check_plan("C-102")
    validate_plan(Plan.parse(plan), CASEOPS_TOOLS, max_nodes=64)


def test_the_seed_example_is_a_valid_seed_file() -> None:
    seed = SeedData.model_validate(json_blocks(section("Seed files", CASEOPS))[0])

    assert [case.case_id for case in seed.cases] == ["C-102"]


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`((?:RAYDAG|OPENAI)_[A-Z_]+)`", section("Settings", CONFIGURATION)))

    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names |= set(alias.choices) if isinstance(alias, AliasChoices) else {f"RAYDAG_{name.upper()}"}
    assert names <= documented


def test_every_stop_reason_is_documented() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", section("Stop reasons", API), flags=re.MULTILINE))

    assert documented == {reason.value for reason in StopReason}


def test_every_budget_is_documented_with_its_default() -> None:
    rows = re.findall(
        r"^\| `([a-z_]+)` — [^|]+\| ([\d,.]+) \|", section("Budgets", CONTROL_PLANE), flags=re.MULTILINE
    )
    documented = {name: float(default.replace(",", "")) for name, default in rows}

    defaults = Budgets()
    assert documented == {name: float(getattr(defaults, name)) for name in Budgets.model_fields}


def test_the_policy_rules_documented_are_the_rules_there_are() -> None:
    code = document("dag/policy.py") + document("dag/evidence.py")
    rules = set(re.findall(r'"((?:tool|tenant|risk|stage|scope|resource|toolset)\.[a-z_]+)"', code))
    rules.add("resource.case_bound")  # resource.<key>_bound for the caseops key, case_id
    authorization = set(
        re.findall(
            r"^\| `([a-z_]+\.[a-z_]+)` \|", section("Authorization", CONTROL_PLANE), flags=re.MULTILINE
        )
    )
    in_metrics = set(re.findall(r"`((?:tool|tenant|risk|stage|scope|resource|toolset)\.[a-z_<>]+)`", METRICS))

    assert {"scope.missing", "resource.not_observed", "toolset.definition_changed"} <= rules
    assert authorization == rules
    assert {rule for rule in in_metrics if not re.fullmatch(r"resource\.[a-z_<>]+_bound", rule)} <= rules


def test_the_readme_shows_the_two_fresh_machine_commands() -> None:
    [commands] = blocks("sh", section("On a fresh machine"))

    lines = [line.split("#")[0].strip() for line in commands.splitlines()]
    assert [line for line in lines if line] == ["make demo", "make test"]


def test_the_first_screen_toolsets_example_is_a_valid_toolsets_file() -> None:
    from actors.toolsets import parse_toolsets

    first_screen = README[: README.index("\n## ")]
    block = blocks("yaml", first_screen)[0]

    toolsets = parse_toolsets(block, "README.md", {})
    assert [server.name for server in toolsets.servers] == ["search", "files"]


def test_the_tour_declares_its_server_runs_its_plan_and_names_no_planner() -> None:
    from actors.toolsets import parse_toolsets

    tour = section("A five-minute tour over a server of your own")
    toolsets = parse_toolsets(blocks("yaml", tour)[0], "my.yaml", {})
    plan = Plan.parse(json_blocks(tour)[0])
    [command] = [
        line for block in blocks("sh", tour) for line in block.splitlines() if line.startswith("raydag run")
    ]
    words = shlex.split(command)

    declared = {tool for server in toolsets.servers for tool in server.tools}
    assert {node.tool for node in plan.nodes} <= declared
    assert [words[words.index(option) + 1] for option in ("--toolsets", "--plan", "--resource")] == [
        "my.yaml",
        "plan.json",
        "root=/srv/reports",
    ]
    assert "--planner" not in words

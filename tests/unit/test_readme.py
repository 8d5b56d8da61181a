"""The README's examples and reference tables are checked against the code, so they cannot rot."""

from __future__ import annotations

import json
import re

from pydantic import AliasChoices

from actors.launch.settings import Settings
from dag.plan import Plan
from dag.states import StopReason
from dag.validate import validate_plan
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.planner import document_check_plan
from mcp_server.seed import SeedData
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def json_blocks(text: str) -> list[object]:
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, flags=re.DOTALL)]


def test_the_plan_example_is_the_conformance_plan_and_is_valid() -> None:
    plan = json_blocks(section("The plan format"))[0]

    assert plan == document_check_plan("C-102")
    validate_plan(Plan.parse(plan), CASEOPS_TOOLS, max_nodes=64)


def test_the_seed_example_is_a_valid_seed_file() -> None:
    seed = SeedData.model_validate(json_blocks(section("Seed files"))[0])

    assert [case.case_id for case in seed.cases] == ["C-102"]


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`((?:RAYDAG|OPENAI)_[A-Z_]+)`", section("Configuration")))

    names = set()
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names |= set(alias.choices) if isinstance(alias, AliasChoices) else {f"RAYDAG_{name.upper()}"}
    assert names <= documented


def test_every_stop_reason_is_documented() -> None:
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", section("HTTP API"), flags=re.MULTILINE))

    assert documented == {reason.value for reason in StopReason}


def test_the_readme_shows_the_two_fresh_machine_commands() -> None:
    commands = section("On a fresh machine")

    assert "make demo" in commands
    assert "make test" in commands


def test_the_first_screen_toolsets_example_is_a_valid_toolsets_file() -> None:
    from actors.toolsets import parse_toolsets

    first_screen = README[: README.index("\n## ")]
    block = re.findall(r"```yaml\n(.*?)```", first_screen, flags=re.DOTALL)[0]

    toolsets = parse_toolsets(block, "README.md", {})
    assert [server.name for server in toolsets.servers] == ["search", "files"]

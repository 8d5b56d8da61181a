"""Which planners a deployment offers, and which answer the model planner's final decision must fit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mcp_server.planner import DocumentCheckResult
from planner.answer import Answer
from planner.openai_planner import OpenAIPlanner, OpenAISettings
from planner.registry import load_planners
from tests.conftest import REPO


def model_planner(answer_model: str | None) -> OpenAIPlanner:
    settings = OpenAISettings(api_key="sk-test-not-a-real-key", answer_model=answer_model)
    planner = load_planners(openai=settings)["openai"]
    assert isinstance(planner, OpenAIPlanner)
    return planner


def test_without_an_answer_model_the_model_answers_in_no_toolsets_words() -> None:
    planner = model_planner(None)
    assert planner.result_model is Answer
    words = str(Answer.model_json_schema()).lower()
    assert not {"case", "document", "policy"} & set(words.replace("'", " ").split())


def test_a_deployment_names_its_answer_model_by_import_path() -> None:
    assert model_planner("mcp_server.planner:DocumentCheckResult").result_model is DocumentCheckResult


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("mcp_server.planner", "is not 'package.module:Name'"),
        ("mcp_server.planner:document_check_plan", "is not a pydantic model"),
    ],
)
def test_an_answer_model_that_is_not_a_model_is_refused_at_start(path: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        model_planner(path)


def test_no_model_planner_without_its_settings_and_no_toolsets_planner_unless_named() -> None:
    assert set(load_planners()) == {"outputs"}
    assert set(load_planners(["mcp_server.planner:ConformancePlanner"])) == {"conformance", "outputs"}


def test_no_raydag_process_imports_the_openai_sdk_until_a_model_planner_is_built() -> None:
    # ~0.4 s of imports that every command, supervisor and API replica paid, with or without a key. In a
    # process of its own: this one may have built a model planner already.
    probe = (
        "import sys, actors.cli.main, actors.supervisor, actors.api.app, raydag; "
        "print(sorted(name for name in sys.modules if name.partition('.')[0] == 'openai'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

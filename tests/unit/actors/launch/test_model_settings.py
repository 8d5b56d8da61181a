"""The model settings: which API, how long and how often, how much an answer may take, which models a tenant's
runs may name. Each bad value stops the load naming its variable."""

from __future__ import annotations

import pytest

from actors.launch.settings import ConfigurationError, load_settings
from planner.model_api import ModelApi


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, (ModelApi.RESPONSES, 60.0, 3, 4096, 64)),
        (
            {
                "RAYDAG_MODEL_API": "chat",
                "RAYDAG_MODEL_TIMEOUT_S": "120.5",
                "RAYDAG_MODEL_MAX_RETRIES": "0",
                "RAYDAG_MODEL_MAX_OUTPUT_TOKENS": "512",
                "RAYDAG_MAX_NODES": "12",
            },
            (ModelApi.CHAT, 120.5, 0, 512, 12),
        ),
    ],
    ids=["defaults", "set"],
)
def test_the_model_settings_reach_the_planner(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected: tuple[object, ...]
) -> None:
    for variable, value in {"OPENAI_API_KEY": "sk-test", **environment}.items():
        monkeypatch.setenv(variable, value)

    settings = load_settings().openai_settings()

    assert settings is not None
    assert (
        settings.api,
        settings.timeout_s,
        settings.max_retries,
        settings.max_output_tokens,
        settings.max_plan_nodes,
    ) == expected


def load_problem(monkeypatch: pytest.MonkeyPatch, **environment: str) -> str:
    """What loading the settings says is wrong with ``environment``."""
    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    return str(raised.value)


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("RAYDAG_MODEL_API", "completions", "RAYDAG_MODEL_API: Input should be 'responses' or 'chat'"),
        ("RAYDAG_MODEL_TIMEOUT_S", "0", "RAYDAG_MODEL_TIMEOUT_S: Input should be greater than 0"),
        ("RAYDAG_MODEL_TIMEOUT_S", "inf", "RAYDAG_MODEL_TIMEOUT_S: "),
        ("RAYDAG_MODEL_TIMEOUT_S", "soon", "RAYDAG_MODEL_TIMEOUT_S: Input should be a valid number"),
        (
            "RAYDAG_MODEL_MAX_RETRIES",
            "-1",
            "RAYDAG_MODEL_MAX_RETRIES: Input should be greater than or equal to 0",
        ),
        (
            "RAYDAG_MODEL_MAX_RETRIES",
            "11",
            "RAYDAG_MODEL_MAX_RETRIES: Input should be less than or equal to 10",
        ),
        (
            "RAYDAG_MODEL_MAX_OUTPUT_TOKENS",
            "8",
            "RAYDAG_MODEL_MAX_OUTPUT_TOKENS: Input should be greater than",
        ),
    ],
)
def test_a_bad_model_setting_stops_the_load_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    message = load_problem(monkeypatch, **{variable: value})

    assert message.startswith(problem), message


def test_streamed_plans_over_chat_completions_are_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    message = load_problem(monkeypatch, RAYDAG_MODEL_API="chat", RAYDAG_MODEL_STREAMING="true")

    assert message.startswith("RAYDAG_MODEL_STREAMING=true needs RAYDAG_MODEL_API=responses")


def test_a_tenant_policy_lists_the_models_its_runs_may_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_TENANT_POLICY", '{"tenant-a": {"models": ["gpt-small", "gpt-big"]}}')

    policies = dict(load_settings().tenant_policies())

    assert policies["tenant-a"].models == frozenset({"gpt-small", "gpt-big"})


@pytest.mark.parametrize("models", ['"gpt-small"', '[""]', "[42]"])
def test_a_malformed_model_list_stops_the_load_naming_the_tenant(
    monkeypatch: pytest.MonkeyPatch, models: str
) -> None:
    message = load_problem(monkeypatch, RAYDAG_TENANT_POLICY=f'{{"tenant-a": {{"models": {models}}}}}')

    assert message.startswith("RAYDAG_TENANT_POLICY: tenant 'tenant-a': models"), message

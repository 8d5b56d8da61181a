"""Configuration errors name the environment variables a user sets, not the fields behind them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from actors.launch.settings import ConfigurationError, Settings, describe_errors, load_settings


def test_a_bad_value_names_its_variable_and_what_was_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_TOOL_EXECUTOR", "threads")
    monkeypatch.setenv("RAYDAG_PORT", "eighty")

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    message = str(raised.value)
    assert (
        "RAYDAG_TOOL_EXECUTOR: Input should be 'tasks', 'callers' or 'supervisor' (got 'threads')" in message
    )
    assert "RAYDAG_PORT: " in message
    assert "(got 'eighty')" in message
    assert "tool_executor" not in message


def test_a_check_across_settings_keeps_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_REPLICAS", "3")
    monkeypatch.setenv("RAYDAG_MAX_REPLICAS", "2")

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value).startswith("RAYDAG_MAX_REPLICAS=2 is below RAYDAG_REPLICAS=3")


def test_a_variable_without_the_prefix_is_named_as_set() -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(OPENAI_BASE_URL=42)  # type: ignore[call-arg]

    assert describe_errors(raised.value) == "OPENAI_BASE_URL: Input should be a valid string (got 42)"


@pytest.mark.parametrize(
    ("given", "variable"),
    [({"token_key": 4242}, "RAYDAG_TOKEN_KEY"), ({"OPENAI_API_KEY": 4242}, "OPENAI_API_KEY")],
)
def test_a_rejected_secret_is_not_echoed(given: dict[str, object], variable: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(**given)  # type: ignore[arg-type]

    message = describe_errors(raised.value)
    assert message.startswith(f"{variable}: ")
    assert "4242" not in message


@pytest.mark.parametrize("price", ["inf", "nan", "1e308", "-1"])
def test_a_model_price_no_cost_could_be_recorded_with_is_refused(
    monkeypatch: pytest.MonkeyPatch, price: str
) -> None:
    monkeypatch.setenv("RAYDAG_MODEL_INPUT_USD_PER_MTOK", price)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value).startswith("RAYDAG_MODEL_INPUT_USD_PER_MTOK: ")

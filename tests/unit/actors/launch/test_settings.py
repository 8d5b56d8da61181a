"""Configuration errors name the environment variables a user sets, not the fields behind them."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from actors.launch.settings import (
    ConfigurationError,
    Settings,
    describe_errors,
    load_settings,
    shipped_toolsets,
)
from actors.supervisor import SupervisorConfig
from dag.budget import Budgets
from dag.contracts import Risk
from dag.policy import TenantPolicy
from dag.tokens import TaskTokens


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


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ("not json", "RAYDAG_TENANT_POLICY: expected JSON"),
        ('["tenant-a"]', "RAYDAG_TENANT_POLICY: expected JSON"),
        (
            '{"tenant-a": {"self_aproval": []}}',
            "tenant 'tenant-a': self_aproval: Extra inputs are not permitted",
        ),
        ('{"tenant-a": {"self_approval": ["read_only"]}}', "lists write risks only"),
        (
            '{"tenant-a": {"self_approval": ["writes"]}}',
            "tenant 'tenant-a': self_approval.0: Input should be",
        ),
    ],
)
def test_a_malformed_tenant_policy_stops_at_start_naming_the_tenant_and_field(
    monkeypatch: pytest.MonkeyPatch, policy: str, problem: str
) -> None:
    monkeypatch.setenv("RAYDAG_TENANT_POLICY", policy)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert problem in str(raised.value)


SECRET_KEY = "sk-secret-key-0123"


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        pytest.param(
            "RAYDAG_API_KEYS",
            "{broken",
            'RAYDAG_API_KEYS: expected a JSON object {"<key>": {"tenant_id": ..., "subject": ..., "scopes": '
            "[...]}}: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
            id="api-keys-not-json",
        ),
        pytest.param(
            "RAYDAG_API_KEYS",
            f'["{SECRET_KEY}"]',
            'RAYDAG_API_KEYS: expected a JSON object {"<key>": {"tenant_id": ..., "subject": ..., "scopes": '
            "[...]}}",
            id="api-keys-not-an-object",
        ),
        pytest.param(
            "RAYDAG_API_KEYS",
            f'{{"dev": {{"tenant_id": "t", "subject": "s"}}, "{SECRET_KEY}": {{"tenant_id": "t"}}}}',
            "RAYDAG_API_KEYS: the grant of key 2 of 2: subject: Field required",
            id="api-keys-a-grant-short-of-a-field",
        ),
        pytest.param(
            "RAYDAG_TENANT_TOOLS",
            '{"tenant-a": "caseops_get_case_snapshot"}',
            "RAYDAG_TENANT_TOOLS: tenant 'tenant-a': expected a list of tool names",
            id="tenant-tools-not-a-list",
        ),
        pytest.param(
            "RAYDAG_DATABASE_URL",
            "not-a-dsn",
            "RAYDAG_DATABASE_URL: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
            id="database-url-not-a-url",
        ),
        pytest.param(
            "RAYDAG_DATABASE_URL",
            f"postgresql://raydag:{SECRET_KEY}@db.example:54x2/raydag",
            "RAYDAG_DATABASE_URL: the port '54x2' is not a number",
            id="database-url-port-not-a-number",
        ),
        pytest.param(
            "RAYDAG_TOKEN_KEY",
            "short",
            "RAYDAG_TOKEN_KEY: must be at least 32 bytes long",
            id="token-key-short",
        ),
    ],
)
def test_a_setting_that_does_not_parse_stops_the_load_naming_it_and_quoting_no_secret(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    """Parsed at load, not when the API first builds its keys inside Ray Serve, after everything started."""
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert str(raised.value).startswith(problem)
    assert SECRET_KEY not in str(raised.value)


def test_the_development_keys_off_loopback_are_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_HOST", "0.0.0.0")

    with pytest.raises(ConfigurationError, match=r"RAYDAG_HOST=0\.0\.0\.0 is not a loopback address"):
        load_settings().api_key_grants()


def test_a_tenant_not_named_in_the_policy_gets_the_strictest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYDAG_TENANT_POLICY", '{"tenant-a": {"self_approval": ["reversible_write"]}}')

    policies = dict(load_settings().tenant_policies())

    assert policies == {"tenant-a": TenantPolicy(self_approval=frozenset({Risk.REVERSIBLE_WRITE}))}
    assert SupervisorConfig(
        dsn="",
        mcp_url="",
        token_key=b"",
        limits=Budgets(),
        tenant_policies=tuple(policies.items()),
        toolsets=shipped_toolsets("http://127.0.0.1:9/mcp"),
    ).policy_of("tenant-b") == TenantPolicy(self_approval=frozenset())


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


def task_token_key(home: Path, configured: str | None = None) -> bytes:
    return Settings(home=home, token_key=configured).task_token_key()  # type: ignore[arg-type]


def test_the_token_key_is_generated_once_per_home_private_to_its_owner(tmp_path: Path) -> None:
    home = tmp_path / "raydag-home"
    key = task_token_key(home)
    assert len(key) >= 32
    assert sorted(path.name for path in home.iterdir()) == ["token.key"]  # no scratch file left behind
    assert stat.S_IMODE((home / "token.key").stat().st_mode) == 0o600
    assert task_token_key(home) == key
    assert task_token_key(home, "") == key
    TaskTokens(key=key, audience="http://127.0.0.1/mcp")


def test_two_homes_get_different_keys(tmp_path: Path) -> None:
    assert task_token_key(tmp_path / "a") != task_token_key(tmp_path / "b")


def test_a_configured_key_wins_over_the_generated_one_and_writes_no_file(tmp_path: Path) -> None:
    generated = task_token_key(tmp_path / "a")
    configured = "c" * 40
    assert task_token_key(tmp_path / "b", configured) == configured.encode()
    assert generated != configured.encode()
    assert not (tmp_path / "b" / "token.key").exists()


def test_a_short_configured_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        task_token_key(tmp_path, "c" * 31)
    assert not (tmp_path / "token.key").exists()


# ---------------------------------------------------------------- budgets: limits, defaults, a tenant's


def test_by_default_a_run_gets_two_minutes_of_its_own_work_and_may_ask_for_an_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = load_settings()

    assert (settings.defaults.deadline_s, settings.limits.deadline_s) == (120, 3600)
    assert settings.defaults.approval_wait_s == 86_400  # a person gets a day
    assert settings.limits.approval_wait_s == 30 * 86_400
    assert settings.limits.max_nodes == settings.defaults.max_nodes == 64


def test_the_budget_settings_set_limits_and_defaults_and_the_max_settings_keep_theirs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAYDAG_BUDGET_LIMITS", '{"deadline_s": 7200, "max_replans": 5}')
    monkeypatch.setenv("RAYDAG_BUDGET_DEFAULTS", '{"deadline_s": 300}')
    monkeypatch.setenv("RAYDAG_MAX_NODES", "128")

    settings = load_settings()

    assert (settings.limits.deadline_s, settings.limits.max_replans, settings.limits.max_nodes) == (
        7200,
        5,
        128,
    )
    assert (settings.defaults.deadline_s, settings.defaults.max_replans, settings.defaults.max_nodes) == (
        300,
        2,
        64,
    )


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("RAYDAG_BUDGET_LIMITS", "{deadline", "RAYDAG_BUDGET_LIMITS: expected JSON"),
        ("RAYDAG_BUDGET_LIMITS", '{"deadline": 60}', "RAYDAG_BUDGET_LIMITS: deadline: Extra inputs"),
        (
            "RAYDAG_BUDGET_LIMITS",
            '{"deadline_s": 100000}',
            "RAYDAG_BUDGET_LIMITS: deadline_s: Input should be",
        ),
        ("RAYDAG_BUDGET_DEFAULTS", '{"deadline_s": 4000}', "RAYDAG_BUDGET_DEFAULTS: deadline_s 4000 > 3600"),
        (
            "RAYDAG_TENANT_POLICY",
            '{"tenant-a": {"budgets": {"approval_wait_s": 9999999}}}',
            "tenant 'tenant-a''s budgets: approval_wait_s 9999999 > 2592000",
        ),
    ],
)
def test_a_budget_setting_that_cannot_hold_is_refused_at_load_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(ConfigurationError) as raised:
        load_settings()

    assert problem in str(raised.value)


def test_out_of_the_box_a_development_approver_may_decide_and_the_other_keys_may_not() -> None:
    from actors.launch.settings import DEV_API_KEYS
    from actors.run.approvals import DECISION_SCOPES

    declared = frozenset({"cases:read", "documents:request"})
    approver = DEV_API_KEYS["dev-key-approver"].principal(declared)
    requester = DEV_API_KEYS["dev-key-tenant-demo"].principal(declared)

    assert approver.scopes == declared | DECISION_SCOPES
    assert {"runs:approve", "runs:review", "runs:answer"} == DECISION_SCOPES
    assert (approver.tenant_id, approver.subject) == ("tenant-demo", "dev-approver")
    assert requester.scopes == declared  # the requester is not the approver: separation of duties holds

"""Configuration from ``RAYDAG_*`` environment variables; every default is safe on a laptop."""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, get_args

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict

from actors.calls.call import ExecutorKind
from actors.calls.exchange import DEFAULT_CALLERS
from actors.launch.serving import DEFAULT_HOME
from actors.run.approvals import DECISION_SCOPES
from actors.run.submission import MAX_ACTIVE_RUNS
from actors.toolsets.config import Toolsets, load_toolsets
from dag.agents import AGENT_DEPTH_CAP, AGENT_DEPTH_LIMIT
from dag.budget import NODES_CAP, WAIT_CAP_S, BudgetRequest, Budgets
from dag.contracts import Risk
from dag.policy import Principal, TenantPolicy
from dag.tokens import MIN_KEY_BYTES
from planner.model_api import ModelApi
from planner.openai_planner import OpenAISettings


class ConfigurationError(ValueError):
    """The environment holds settings raydag cannot run with; the message names each variable at fault."""


class ApiKeyGrant(BaseModel):
    """What an API key stands for. Tenant, subject and scopes come from here, never from a request body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant_id: str
    subject: str
    scopes: tuple[str, ...] | None = None
    """The scopes the key grants; unset, every scope the deployment's toolsets declare (a development key)."""
    decides: bool = False
    """The key also grants every scope a person needs to decide what runs wait for (``runs:approve``,
    ``runs:review``, ``runs:answer``): an approver's key."""

    def principal(self, declared: frozenset[str]) -> Principal:
        """Who the key stands for, ``declared`` the scopes of the toolsets served."""
        scopes = frozenset(self.scopes if self.scopes is not None else declared)
        return Principal(self.tenant_id, self.subject, scopes | DECISION_SCOPES if self.decides else scopes)


DEV_API_KEYS: dict[str, ApiKeyGrant] = {
    "dev-key-tenant-demo": ApiKeyGrant(tenant_id="tenant-demo", subject="dev-demo"),
    "dev-key-approver": ApiKeyGrant(tenant_id="tenant-demo", subject="dev-approver", decides=True),
    "dev-key-tenant-other": ApiKeyGrant(tenant_id="tenant-other", subject="dev-other"),
}


SHIPPED_TOOLSETS = "mcp_server:caseops.yaml"
"""The toolsets a deployment serves when ``RAYDAG_TOOLSETS`` names none: the worked example's declaration, a
file its package ships (named, not imported: the runtime knows the example only through what it declares).
Named here, where the runtime is composed: the layers below read whatever toolsets they are given."""


def shipped_toolsets(mcp_url: str) -> Toolsets:
    """The shipped toolsets (``SHIPPED_TOOLSETS``), their hosted server at ``mcp_url``."""
    return load_toolsets(SHIPPED_TOOLSETS, {"RAYDAG_MCP_URL": mcp_url})


SERVER_LIMITS = Budgets(
    deadline_s=3_600.0,
    approval_wait_s=WAIT_CAP_S,
    review_wait_s=WAIT_CAP_S,
    question_wait_s=WAIT_CAP_S,
    resolution_wait_s=WAIT_CAP_S,
)
"""The most of each budget a request may ask for, unless ``RAYDAG_BUDGET_LIMITS`` says otherwise: an hour of
a run's own work, thirty days for a person's decision, the defaults (``Budgets()``) for the rest."""

MAX_USD_PER_MTOK = 1_000_000.0
"""The highest model price a setting may give, in USD per million tokens: far above any model's, and far below
what a run's token counts could multiply past a float (a cost of Infinity no event can record)."""


class TenantPolicyEntry(BaseModel):
    """One tenant's entry in ``RAYDAG_TENANT_POLICY``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    self_approval: frozenset[Risk] = frozenset()
    """The write risks (``reversible_write``, ``irreversible_write``) whose operations the run's own principal
    may decide; a ``read_only`` tool has no operations to decide."""

    plan_review: bool = False
    """Every run of the tenant waits for a person to approve its plan (as if it asked ``review: plan``)."""
    self_review: bool = False
    """The run's own principal may approve or reject its run's plan."""
    budgets: BudgetRequest | None = None
    """What the tenant's runs get of each budget they do not ask for (each within the server's limits)."""
    models: frozenset[Annotated[str, StringConstraints(min_length=1, max_length=200)]] = frozenset()
    """The models the tenant's runs may name for their planning, besides ``RAYDAG_MODEL``."""

    def policy(self) -> TenantPolicy:
        return TenantPolicy(
            self_approval=frozenset(self.self_approval),
            plan_review=self.plan_review,
            self_review=self.self_review,
            budgets=self.budgets,
            models=frozenset(self.models),
        )

    @model_validator(mode="after")
    def _writes_only(self) -> TenantPolicyEntry:
        if Risk.READ_ONLY in self.self_approval:
            raise ValueError("self_approval lists write risks only: a read_only tool has no operations")
        return self


class Settings(BaseSettings):
    """All of raydag's settings. Each field ``x`` is read from ``RAYDAG_X``."""

    model_config = SettingsConfigDict(env_prefix="RAYDAG_", extra="ignore", frozen=True)

    home: Path = Field(default=DEFAULT_HOME)
    database_url: SecretStr | None = None
    token_key: SecretStr | None = None
    api_keys: SecretStr | None = None
    mcp_url: str | None = None
    toolsets: Path | None = None
    """The toolsets file (``RAYDAG_TOOLSETS``): the MCP servers runs may use; unset, the caseops toolset."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    tool_latency_ms: int = Field(default=0, ge=0, le=60_000)
    max_nodes: int = Field(default=Budgets().max_nodes, ge=1, le=NODES_CAP)
    max_fanout: int = Field(default=Budgets().max_fanout, ge=0, le=NODES_CAP)
    supervisor_name: str = "raydag-supervisor"
    supervisors: int = Field(default=1, ge=1, le=64)
    """How many supervisors share the deployment's runs: ``RAYDAG_SUPERVISOR_NAME``, then ``…-1``, ``…-2``. New runs
    go to each in turn; each run has one owner at a time (its lease), and a dead one's runs are taken over."""
    dashboard: bool = True
    """Whether ``raydag serve`` starts the Ray dashboard (port 8265) with its local Ray."""
    db_pool_size: int = Field(default=4, ge=1, le=50)
    tool_executor: ExecutorKind = ExecutorKind.CALLERS
    """How tool calls run: ``callers`` (a few async actors per supervisor), ``tasks`` (a Ray task per call) or
    ``supervisor`` (in the supervisor's own event loop: cheaper, but the calls are not Ray tasks)."""
    tool_callers: int = Field(default=DEFAULT_CALLERS, ge=1, le=64)
    """How many caller actors each supervisor starts with ``RAYDAG_TOOL_EXECUTOR=callers``."""
    max_active_runs: int = Field(default=MAX_ACTIVE_RUNS, ge=1, le=10_000)
    """How many runs each supervisor drives at once; more are accepted and wait their turn, oldest first."""
    agent_depth: int = Field(default=AGENT_DEPTH_LIMIT, ge=0, le=AGENT_DEPTH_CAP)
    """How deep agent nodes' child runs may nest (0: no agent node runs)."""
    planners: str = ""
    """Comma-separated ``package.module:ClassName`` planners offered beside the built-in ones."""
    outbox_webhook_url: str | None = None
    """Where terminal run events are POSTed (at least once); unset, they are logged."""
    lease_s: float = Field(default=15.0, ge=1.0, le=600.0)
    """How long a supervisor's ownership of a run lasts without renewal; a dead supervisor's runs are
    taken over after it."""
    stop_grace_s: float = Field(default=15.0, ge=0.0, le=600.0)
    """How long a stopping raydag (SIGINT or SIGTERM) waits for its tool calls in flight to land and be
    recorded before it hands its runs over; the default outlasts a tool's timeout (10 s) and its slack (5 s)."""
    openai_api_key: SecretStr | None = Field(default=None, validation_alias=AliasChoices("OPENAI_API_KEY"))
    openai_base_url: str | None = Field(default=None, validation_alias=AliasChoices("OPENAI_BASE_URL"))
    model: str = "gpt-4.1-mini"
    """The model the openai planner asks (``RAYDAG_MODEL``)."""
    model_streaming: bool = False
    """Stream plans: dispatch each node while the model is still writing the rest."""
    model_answer: str | None = None
    """``package.module:Model``, the pydantic model the openai planner's final answer must fit (for caseops'
    document check: ``mcp_server.planner:DocumentCheckResult``); unset, a summary with its findings."""
    model_input_usd_per_mtok: float = Field(default=0.40, ge=0, le=MAX_USD_PER_MTOK, allow_inf_nan=False)
    model_output_usd_per_mtok: float = Field(default=1.60, ge=0, le=MAX_USD_PER_MTOK, allow_inf_nan=False)
    model_api: ModelApi = ModelApi.RESPONSES
    """The API the model endpoint speaks: ``responses`` (OpenAI's) or ``chat`` (Chat Completions, what local
    servers such as llama.cpp's offer)."""
    model_timeout_s: float = Field(default=60.0, gt=0, le=3_600, allow_inf_nan=False)
    """How long one model request may take before the SDK gives up on it (and retries)."""
    model_max_retries: int = Field(default=3, ge=0, le=10)
    """How often the SDK retries a model request that failed transiently (429, 5xx, timeout)."""
    model_max_output_tokens: int = Field(default=4_096, ge=16, le=1_000_000)
    """The most tokens one model answer may take."""
    mcp_allowed_hosts: str | None = None
    """Comma-separated Host values the MCP endpoint accepts (``name:*`` for any port); unset, loopback only."""
    mcp_allowed_origins: str | None = None
    """Comma-separated Origin values the MCP endpoint accepts; unset, loopback only."""
    replicas: int = Field(default=1, ge=1, le=64)
    """API replicas under Ray Serve; with ``max_replicas`` set, the autoscaling minimum."""
    max_replicas: int | None = Field(default=None, ge=1, le=64)
    """Autoscale the API between ``replicas`` and this many replicas."""
    tenant_tools: str | None = None
    """JSON ``{"<tenant>": ["<tool>", ...]}``: each tenant's tool catalogue. Unset: every tool for every tenant."""
    tenant_policy: str | None = None
    """JSON ``{"<tenant>": {"self_approval": ["reversible_write"]}}``: what each tenant lets its people do.
    Unset, or a tenant not named: the strictest (nobody decides their own run's operations)."""
    budget_limits: str | None = None
    """JSON ``{"deadline_s": 7200, ...}``: the most of each budget a request may ask for, in place of
    ``SERVER_LIMITS`` (``RAYDAG_MAX_NODES`` and ``RAYDAG_MAX_FANOUT`` set those two)."""
    budget_defaults: str | None = None
    """JSON ``{"deadline_s": 300, ...}``: what a run gets of each budget it does not ask for, in place of the
    built-in defaults; each at most its limit."""

    @field_validator("api_keys", "tenant_tools", "tenant_policy", "budget_limits", "budget_defaults")
    @classmethod
    def _json_parses(cls, value: SecretStr | str | None, info: ValidationInfo) -> SecretStr | str | None:
        """A malformed JSON setting stops the command at load, named, before it starts anything."""
        if value is not None:
            _JSON_SETTINGS[info.field_name or ""](
                value.get_secret_value() if isinstance(value, SecretStr) else value
            )
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url_is_postgresql(cls, value: SecretStr | None) -> SecretStr | None:
        from actors.store.database import dsn_problem  # not asyncpg on every import of the settings

        problem = dsn_problem(value.get_secret_value()) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("token_key")
    @classmethod
    def _token_key_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and 0 < len(value.get_secret_value().encode("utf-8")) < MIN_KEY_BYTES:
            raise ValueError(f"must be at least {MIN_KEY_BYTES} bytes long")
        return value

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> Settings:
        """A default, the server's or a tenant's, above its limit is an operator's mistake: named at load."""
        limits = self.limits
        above = _above(self.defaults.model_dump(), limits)
        if above:
            raise ValueError(f"RAYDAG_BUDGET_DEFAULTS: {above}, above the limits (RAYDAG_BUDGET_LIMITS)")
        for tenant, policy in self.tenant_policies():
            above = _above(policy.budgets.model_dump(exclude_none=True) if policy.budgets else {}, limits)
            if above:
                raise ValueError(
                    f"RAYDAG_TENANT_POLICY: tenant {tenant!r}'s budgets: {above}, above the limits"
                )
        return self

    @model_validator(mode="after")
    def _model_streams_over_responses(self) -> Settings:
        if self.model_streaming and self.model_api is ModelApi.CHAT:
            raise ValueError(
                "RAYDAG_MODEL_STREAMING=true needs RAYDAG_MODEL_API=responses: streamed plans are read from "
                "the Responses API's events (set RAYDAG_MODEL_STREAMING=false to use chat)"
            )
        return self

    @model_validator(mode="after")
    def _replica_range(self) -> Settings:
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError(
                f"RAYDAG_MAX_REPLICAS={self.max_replicas} is below RAYDAG_REPLICAS={self.replicas}: the "
                "autoscaling maximum must be at least the minimum"
            )
        return self

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser().resolve()

    def task_token_key(self) -> bytes:
        """The key task tokens are signed with: ``RAYDAG_TOKEN_KEY`` if set, else one generated once per
        installation under ``RAYDAG_HOME`` (written atomically: a concurrent first start keeps exactly one)."""
        if self.token_key is not None and self.token_key.get_secret_value():
            return self.token_key.get_secret_value().encode("utf-8")  # long enough: checked at load
        home = self.home_dir
        path = home / "token.key"
        if not path.exists():
            home.mkdir(parents=True, exist_ok=True)
            scratch = home / f".token.key.{os.getpid()}.{secrets.token_hex(4)}"
            descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_hex(32))
            try:
                os.link(scratch, path)
            except FileExistsError:
                pass
            finally:
                scratch.unlink()
        return path.read_text().strip().encode("utf-8")

    @property
    def limits(self) -> Budgets:
        """The most of each budget a request may ask for."""
        limits = _budget_request(self.budget_limits) if self.budget_limits is not None else {}
        return Budgets.model_validate(
            {
                **SERVER_LIMITS.model_dump(),
                "max_nodes": self.max_nodes,
                "max_fanout": self.max_fanout,
                **limits,
            }
        )

    @property
    def defaults(self) -> Budgets:
        """What a run gets of each budget it does not ask for (a tenant's policy may say otherwise)."""
        asked = _budget_request(self.budget_defaults) if self.budget_defaults is not None else {}
        capped = {"max_nodes": self.max_nodes, "max_fanout": self.max_fanout}
        base = Budgets().model_dump()
        return Budgets.model_validate({**base, **{k: min(v, base[k]) for k, v in capped.items()}, **asked})

    def api_key_grants(self) -> dict[str, ApiKeyGrant]:
        """``RAYDAG_API_KEYS`` (JSON: key → grant), or the documented dev keys — on a loopback host only: a
        ``ConfigurationError`` otherwise, which ``raydag serve`` meets before it starts anything."""
        if self.api_keys is None:
            if not _is_loopback(self.host):
                raise ConfigurationError(
                    f"RAYDAG_HOST={self.host} is not a loopback address: set RAYDAG_API_KEYS; the documented "
                    "development keys are refused off loopback"
                )
            return dict(DEV_API_KEYS)
        return _api_key_grants(self.api_keys.get_secret_value())

    def openai_settings(self) -> OpenAISettings | None:
        """The model planner's settings, or ``None`` without ``OPENAI_API_KEY``."""
        if self.openai_api_key is None:
            return None
        return OpenAISettings(
            api_key=self.openai_api_key.get_secret_value(),
            model=self.model,
            base_url=self.openai_base_url,
            streaming=self.model_streaming,
            input_usd_per_mtok=self.model_input_usd_per_mtok,
            output_usd_per_mtok=self.model_output_usd_per_mtok,
            answer_model=self.model_answer,
            api=self.model_api,
            timeout_s=self.model_timeout_s,
            max_retries=self.model_max_retries,
            max_output_tokens=self.model_max_output_tokens,
            max_plan_nodes=self.max_nodes,
        )

    def mcp_hosts(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """``(hosts, origins)`` for the MCP endpoint's DNS-rebinding protection, or ``None`` for loopback only."""
        if self.mcp_allowed_hosts is None and self.mcp_allowed_origins is None:
            return None

        def split(value: str | None) -> tuple[str, ...]:
            return tuple(item.strip() for item in (value or "").split(",") if item.strip())

        return split(self.mcp_allowed_hosts), split(self.mcp_allowed_origins)

    def planner_paths(self) -> tuple[str, ...]:
        """``RAYDAG_PLANNERS`` as import paths."""
        return tuple(path.strip() for path in self.planners.split(",") if path.strip())

    def toolset_declarations(self, mcp_url: str | None = None) -> Toolsets:
        """The toolsets file ``RAYDAG_TOOLSETS`` names, or the shipped ones (``SHIPPED_TOOLSETS``), loaded;
        ``ToolsetsInvalid`` names the file, line and field of a malformed one. ``${RAYDAG_MCP_URL}`` in it is
        ``mcp_url`` when given (the hosted server a command started itself), else the environment's."""
        variables = dict(os.environ)
        if mcp_url is not None:
            variables["RAYDAG_MCP_URL"] = mcp_url
        source = self.toolsets.expanduser() if self.toolsets is not None else SHIPPED_TOOLSETS
        return load_toolsets(source, variables)

    def tenant_tool_grants(self) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
        """``RAYDAG_TENANT_TOOLS`` as (tenant, tools) pairs, or ``None`` when every tenant gets every tool."""
        return _tenant_tools(self.tenant_tools) if self.tenant_tools is not None else None

    def tenant_policies(self) -> tuple[tuple[str, TenantPolicy], ...]:
        """``RAYDAG_TENANT_POLICY`` as (tenant, policy) pairs; a tenant not named gets ``TenantPolicy()``."""
        entries = _tenant_policy_entries(self.tenant_policy) if self.tenant_policy is not None else {}
        return tuple((tenant, entries[tenant].policy()) for tenant in sorted(entries))


def _json_object(text: str, shape: str) -> dict[str, Any]:
    """``text`` as a JSON object; a ``ValueError`` says it is not ``shape`` (JSON's own reason quotes no part of
    the text: a setting may be a secret)."""
    try:
        raw: Any = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"expected {shape}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"expected {shape}")
    return raw


def _problems(exc: ValidationError) -> str:
    """Each error of ``exc`` as ``field: what is wrong``, never the value given."""
    return "; ".join(
        f"{'.'.join(map(str, error['loc'])) or 'entry'}: {str(error['msg']).removeprefix('Value error, ')}"
        for error in exc.errors(include_url=False)
    )


def _tenant_policy_entries(text: str) -> dict[str, TenantPolicyEntry]:
    """Each tenant's entry of ``RAYDAG_TENANT_POLICY``; a ``ValueError`` names the tenant and field at fault."""
    raw = _json_object(text, 'JSON {"<tenant>": {"self_approval": ["reversible_write", ...]}}')
    entries = {}
    for tenant, entry in raw.items():
        try:
            entries[tenant] = TenantPolicyEntry.model_validate(entry)
        except ValidationError as exc:
            raise ValueError(f"tenant {tenant!r}: {_problems(exc)}") from None
    return entries


def _api_key_grants(text: str) -> dict[str, ApiKeyGrant]:
    """Each key's grant in ``RAYDAG_API_KEYS``; a ``ValueError`` names the grant at fault by its position, never
    by its key."""
    raw = _json_object(text, 'a JSON object {"<key>": {"tenant_id": ..., "subject": ..., "scopes": [...]}}')
    grants = {}
    for position, (key, grant) in enumerate(raw.items(), start=1):
        try:
            grants[key] = ApiKeyGrant.model_validate(grant)
        except ValidationError as exc:
            raise ValueError(f"the grant of key {position} of {len(raw)}: {_problems(exc)}") from None
    return grants


def _tenant_tools(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``RAYDAG_TENANT_TOOLS`` as (tenant, tools) pairs; a ``ValueError`` says what is wrong."""
    shape = 'JSON {"<tenant>": ["<tool>", ...]}'
    raw = _json_object(text, shape)
    for tenant, tools in raw.items():
        if not isinstance(tools, list) or not all(isinstance(tool, str) for tool in tools):
            raise ValueError(f"tenant {tenant!r}: expected a list of tool names, as in {shape}")
    return tuple(sorted((tenant, tuple(sorted(tools))) for tenant, tools in raw.items()))


def _budget_request(text: str) -> dict[str, Any]:
    """``RAYDAG_BUDGET_LIMITS`` or ``RAYDAG_BUDGET_DEFAULTS``: budget names and values, each within its bounds."""
    raw = _json_object(text, 'JSON {"<budget>": <value>, ...}, e.g. {"deadline_s": 600}')
    try:
        asked = BudgetRequest.model_validate(raw).model_dump(exclude_none=True)
        Budgets.model_validate({**Budgets().model_dump(), **asked})  # each within its documented maximum
    except ValidationError as exc:
        raise ValueError(_problems(exc)) from None
    return asked


def _above(budgets: dict[str, Any], limits: Budgets) -> str:
    """Which of ``budgets`` (by name) exceed ``limits``, as ``deadline_s 7200 > 3600``; empty when none does."""
    return ", ".join(
        f"{name} {_plain(value)} > {_plain(getattr(limits, name))}"
        for name, value in budgets.items()
        if value > getattr(limits, name)
    )


def _plain(value: float) -> str:
    """A budget's value as a person writes it: ``3600``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else str(value)


_JSON_SETTINGS: dict[str, Callable[[str], object]] = {
    "api_keys": _api_key_grants,
    "tenant_tools": _tenant_tools,
    "tenant_policy": _tenant_policy_entries,
    "budget_limits": _budget_request,
    "budget_defaults": _budget_request,
}
"""The parser of each JSON setting: what the settings' methods answer from, and what loading checks."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load_settings() -> Settings:
    """``Settings`` from the environment, or a ``ConfigurationError`` that names the variables, not fields."""
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigurationError(describe_errors(exc)) from None


def describe_errors(exc: ValidationError) -> str:
    """One line per error: the environment variable (``RAYDAG_PORT``), what is wrong, and the value given
    (never a secret's)."""
    lines = []
    for error in exc.errors(include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        if not error["loc"]:  # a check across settings: its message names the variables itself
            lines.append(message)
            continue
        variable, field = _variable(str(error["loc"][0]))
        secret = field is not None and SecretStr in (field.annotation, *get_args(field.annotation))
        given = "" if secret or error["type"] == "missing" else f" (got {error['input']!r})"
        lines.append(f"{variable}: {message}{given}")
    return "; ".join(lines)


def _variable(location: str) -> tuple[str, FieldInfo | None]:
    """The environment variable an error's location stands for (a field, or the alias it is read under)."""
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and location in alias.choices:
            return location, field
        if location == name:
            return f"RAYDAG_{name.upper()}", field
    return location, None

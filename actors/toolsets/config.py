"""The toolsets file: which MCP servers raydag calls, how to reach them, and the operator's policy per tool.

YAML, read with PyYAML (installed with Ray), because Ray's own operator files are YAML and ``yaml.compose``
keeps every node's line, which a precise error needs (``_yaml_lines``). Loading validates everything it can
without contacting a server; ``actors.toolsets.catalogue`` checks the rest against what each server lists.
"""

from __future__ import annotations

import importlib
import os
import re
import string
from collections.abc import Mapping
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from actors.toolsets._yaml_lines import LocatedYaml, ToolsetsInvalid, located_error, parse_located
from dag.budget import WAIT_CAP_S
from dag.contracts import INVESTIGATE, MAX_CONTENT_BLOCKS, MAX_OUTPUT_BYTES, BindingMatch, Recording, Risk
from dag.writes import META_CARRIER, Approval, Intent, KeyCarrier, OperationSpec, Reconcile

TOOLSETS_ENV = "RAYDAG_TOOLSETS"
"""The environment variable that names the toolsets file."""
ProtocolEra = Literal["auto", "2026-07-28", "2025-11-25"]
"""``auto`` asks ``server/discover`` at 2026-07-28 and falls back to the 2025-11-25 handshake."""
SERVER_NAME = r"^[a-z][a-z0-9_-]{0,39}$"
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _interpolated(value: str, info: ValidationInfo) -> str:
    """``${NAME}`` from the loader's variables (the environment by default); ``$$`` is a dollar sign."""
    variables: Mapping[str, str] = (info.context or {}).get("variables", os.environ)
    missing = sorted({name for name in _VARIABLE.findall(value) if name not in variables})
    if missing:
        raise ValueError(f"names variables that are not set: {', '.join(missing)}")
    try:
        return string.Template(value).substitute(variables)
    except ValueError:
        raise ValueError("has a '$' that is neither ${NAME} nor $$") from None


class NoAuth(_Strict):
    """No Authorization header: a local server, or one that trusts its network."""

    mode: Literal["none"] = "none"


class RaydagTokenAuth(_Strict):
    """raydag's own short-lived task token, minted per call with the server's URL as its audience."""

    mode: Literal["raydag-token"] = "raydag-token"


class _SecretSource(_Strict):
    """Where a secret is read, in the process that makes the call: a variable or a file, never this file."""

    env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        if isinstance(data, dict) and {"token", "secret", "client_secret", "value", "password"} & set(data):
            raise ValueError("a secret is never written in the toolsets file: name an env variable or a file")
        return data

    @model_validator(mode="after")
    def _one_source(self) -> _SecretSource:
        if (self.env is None) == (self.file is None):
            mode = getattr(self, "mode", "this")
            raise ValueError(f"{mode} auth reads its secret from exactly one of env and file")
        return self


class BearerAuth(_SecretSource):
    """A static secret sent as ``Authorization: Bearer``."""

    mode: Literal["bearer"] = "bearer"


class OAuthClientCredentials(_SecretSource):
    """OAuth 2.0 client credentials (RFC 6749 section 4.4) with a client secret, through the MCP SDK's flow:
    the server's protected-resource metadata leads to its authorization server, which must be ``issuer``;
    the access token it grants is sent on each request and renewed when refused."""

    mode: Literal["oauth-client-credentials"] = "oauth-client-credentials"
    client_id: str = Field(min_length=1, max_length=200)
    issuer: str = Field(min_length=1)
    """The authorization server the credentials belong to; the flow stops if the server points elsewhere."""
    token_endpoint_auth: Literal["client_secret_basic", "client_secret_post"] = "client_secret_basic"
    scope: str | None = None


Auth = Annotated[NoAuth | RaydagTokenAuth | BearerAuth | OAuthClientCredentials, Field(discriminator="mode")]


class Timeouts(_Strict):
    connect_s: float = Field(default=10.0, gt=0, le=300)
    """Starting a server, the handshake and listing its tools."""
    call_s: float = Field(default=10.0, gt=0, le=3600)
    """A tool call, unless the tool's overlay says otherwise."""


_OUTPUT_BYTES_LIMIT = 64 << 20
_CONTENT_BLOCKS_LIMIT = 100_000


class Binding(_Strict):
    resource: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    match: BindingMatch = BindingMatch.EQUALS


class ReconcileOverlay(_Strict):
    """How to tell whether a write's effect exists: a read-only tool of the same server."""

    tool: str = Field(min_length=1, max_length=128)
    arguments: dict[str, str] = Field(min_length=1)
    """The read's argument → the write's argument it takes its value from, or ``$operation_id``."""
    exists: str | None = Field(default=None, min_length=1, max_length=128)
    """The read's output field that is ``true`` when the effect exists and ``false`` when it does not."""
    matches: dict[str, str] | None = Field(default=None, min_length=1, max_length=1)
    """``{output_field: write_argument}``: the effect exists when the read's field holds what the write was sent
    (a file's ``content``), and does not when it holds something else. Exactly one of this and ``exists``."""
    output: str | None = Field(default=None, min_length=1, max_length=128)
    """The read's output field that holds what the write answers, for a write confirmed by reconciling."""

    @model_validator(mode="after")
    def _one_test(self) -> ReconcileOverlay:
        if (self.exists is None) == (self.matches is None):
            raise ValueError("give exactly one of exists and matches")
        return self


class IntentOverlay(_Strict):
    """What makes two proposals of a write one business operation, whichever runs propose them."""

    arguments: tuple[str, ...] | None = Field(default=None, min_length=1, max_length=64)
    """The arguments whose values name the intent; unset: all of them. Each run-bound and observed-bound
    argument must be among them: an intent over another resource is another operation."""
    window_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """How long after it succeeded the same intent is still the same operation (its outcome read, no second
    call); unset: forever. An operation not yet settled is always joined."""

    @field_validator("arguments")
    @classmethod
    def _each_once(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        twice = sorted({name for name in value if value.count(name) > 1})
        if twice:
            raise ValueError(f"names {twice} more than once")
        return tuple(sorted(value))

    def spec(self) -> Intent:
        return Intent(arguments=self.arguments, window_s=self.window_s)


class OperationOverlay(_Strict):
    """How a write tool acts: only as an operation of the ledger (docs/EFFECTS.md)."""

    approval: Approval = Approval.PERSON
    """Who approves each operation: ``policy`` (at once) or ``person``; an irreversible write always a person."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128)
    """The tool's argument that raydag sets to the operation id, or ``_meta`` to send it in the request's
    ``_meta`` (``io.raydag/operation-id``); ``None``: the tool is given no key."""
    reconcile: ReconcileOverlay | None = None
    approval_window_s: float | None = Field(default=None, gt=0, le=WAIT_CAP_S)
    """How long an operation of this tool waits for a person, if shorter than the run's ``approval_wait_s``."""
    compensate: str | None = Field(default=None, min_length=1, max_length=128)
    """A write tool of the same server that undoes this one's effect (an operation of its own)."""
    intent: IntentOverlay = IntentOverlay()
    """What makes another proposal of this tool, in any run of the tenant, the same operation."""

    @model_validator(mode="after")
    def _key_is_not_intent(self) -> OperationOverlay:
        key = self.idempotency_key
        if key is not None and self.intent.arguments is not None and key in self.intent.arguments:
            raise ValueError(
                f"intent.arguments names {key!r}, the idempotency_key: raydag sets it to the operation id"
            )
        return self

    def spec(self) -> OperationSpec:
        reconcile = self.reconcile
        return OperationSpec(
            approval=self.approval,
            key=KeyCarrier.NONE
            if self.idempotency_key is None
            else KeyCarrier.META
            if self.idempotency_key == META_CARRIER
            else KeyCarrier.ARGUMENT,
            key_argument=self.idempotency_key if self.idempotency_key != META_CARRIER else None,
            reconcile=Reconcile(
                tool=reconcile.tool,
                arguments=tuple(sorted(reconcile.arguments.items())),
                exists=reconcile.exists,
                matches=next(iter(reconcile.matches.items())) if reconcile.matches else None,
                output=reconcile.output,
            )
            if reconcile is not None
            else None,
            approval_window_s=self.approval_window_s,
            compensate=self.compensate,
            intent=self.intent.spec(),
        )


class ToolOverlay(_Strict):
    """The operator's policy for one tool. A server's annotations never stand in for any of it."""

    name: str | None = Field(default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-/]+$")
    """The tool's name on its server, when raydag offers it under another (the overlay's key): tool names are
    one namespace across toolsets, so two servers that both list ``read_text_file`` are told apart this way."""
    scope: str = Field(min_length=1, max_length=100, pattern=r"^[\x21-\x7e]+$")
    risk: Risk
    stages: frozenset[str] = frozenset({INVESTIGATE})
    timeout_s: float | None = Field(default=None, gt=0, le=3600)
    max_attempts: int = Field(default=3, ge=1, le=10)
    recording: Recording = Recording.FULL
    run_bound: dict[str, Binding] = Field(default_factory=dict)
    """Input field → the run resource key it is bound to (``path: root``, or ``{resource, match}``)."""
    observed_bound: frozenset[str] = frozenset()
    split_lines: frozenset[str] = frozenset()
    """String output fields holding one item per line (a listing as text, as server-filesystem's
    ``search_files`` answers): the output also carries ``<field>_lines``, a list a ``for_each`` can iterate."""
    max_output_bytes: int | None = Field(default=None, ge=1024, le=_OUTPUT_BYTES_LIMIT)
    """The largest output of this tool recorded; the server's ``max_output_bytes`` when unset."""
    max_content_blocks: int | None = Field(default=None, ge=1, le=_CONTENT_BLOCKS_LIMIT)
    task: bool = False
    """Call the tool as an MCP task though its listing does not say so: a 2026-07-28 listing cannot (the
    ``io.modelcontextprotocol/tasks`` extension lets the server decide per call), so a long tool of a
    server pinned to that era is named here (docs/TOOLSETS.md)."""

    @field_validator("run_bound", mode="before")
    @classmethod
    def _binding_shorthand(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {name: {"resource": key} if isinstance(key, str) else key for name, key in value.items()}
        return value

    operation: OperationOverlay | None = None
    """For a write tool: how it acts through the operation ledger. A write tool without one is never offered."""

    @model_validator(mode="after")
    def _bound_once(self) -> ToolOverlay:
        both = sorted(set(self.run_bound) & self.observed_bound)
        if both:
            raise ValueError(f"fields {both} are both run-bound and observed-bound")
        return self

    @model_validator(mode="after")
    def _operation_for_writes(self) -> ToolOverlay:
        operation = self.operation
        if operation is None:
            return self
        if self.risk is Risk.READ_ONLY:
            raise ValueError("operation is declared for a write tool only, not a read_only one")
        key = operation.idempotency_key
        if key is not None and key != META_CARRIER and key in {*self.run_bound, *self.observed_bound}:
            raise ValueError(f"idempotency_key {key!r} is set by raydag, so it cannot be bound as well")
        return self

    @field_validator("operation")
    @classmethod
    def _intent_keeps_the_bound(
        cls, value: OperationOverlay | None, info: ValidationInfo
    ) -> OperationOverlay | None:
        """An intent narrowed to some arguments keeps every bound one: two runs over different resources (or
        values each observed) must never share an operation."""
        named = value.intent.arguments if value is not None else None
        if named is None:
            return value
        bound = {*info.data.get("run_bound", {}), *info.data.get("observed_bound", ())}
        missing = sorted(bound - set(named))
        if missing:
            raise ValueError(
                f"intent.arguments leaves out {missing}, which are bound: an intent over another resource "
                "is another operation"
            )
        return value


class ResourceCheckSpec(_Strict):
    """Who may run over which resource, for one server: exactly one of

    - ``callable``: a Python callable, ``module:function``, awaited as
      ``check(principal=, resource=, database=)`` and answering a ``dag.run_resource.ResourceAnswer``;
    - ``tool``: one of the server's declared tools, called with the run-bound arguments the resource gives
      it; the resource is the principal's if the call succeeds.
    """

    callable: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$")
    tool: str | None = Field(default=None, min_length=1)

    @field_validator("callable")
    @classmethod
    def _importable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                imported_callable(value)
            except (ImportError, AttributeError) as exc:
                raise ValueError(f"cannot be imported ({type(exc).__name__}: {exc})") from None
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ResourceCheckSpec:
        if (self.callable is None) == (self.tool is None):
            raise ValueError("give exactly one of callable and tool")
        return self


def imported_callable(path: str) -> Any:
    """The object ``module:name`` names; ``ImportError``/``AttributeError`` if there is none."""
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    if not callable(found):
        raise AttributeError(f"{path} is not callable")
    return found


class FromEnv(_Strict):
    from_env: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    secret: bool = True
    """Whether the value is a secret the server must not echo into anything raydag records (it is then
    redacted from the server's errors, outputs and stderr). ``false`` for a plain setting such as a path."""


RAY_RESOURCE = r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$"
_BUILT_IN_RESOURCES = frozenset({"CPU", "GPU", "memory", "object_store_memory"})


class Placement(_Strict):
    """Which Ray nodes may host the server's callers (and so a stdio server's process): those offering every
    custom resource named, in at least the amount named (``ray start --resources '{"files-host": 1}'``). A
    caller takes that much of it while it lives; a small amount lets many callers share a node."""

    resources: dict[str, float] = Field(min_length=1, max_length=8)

    @field_validator("resources")
    @classmethod
    def _custom(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if not re.match(RAY_RESOURCE, name) or name in _BUILT_IN_RESOURCES:
                raise ValueError(f"{name!r} is not a custom Ray resource name")
            if not 0 < amount <= 1_000:
                raise ValueError(f"{name!r}: an amount above 0 and at most 1000, not {amount}")
        return value


class _Server(_Strict):
    name: str = Field(pattern=SERVER_NAME)
    protocol: ProtocolEra = "auto"
    max_concurrency: int = Field(default=16, ge=1, le=1024)
    """Calls in flight to this server from one calling process."""
    timeouts: Timeouts = Timeouts()
    max_output_bytes: int = Field(default=MAX_OUTPUT_BYTES, ge=1024, le=_OUTPUT_BYTES_LIMIT)
    """The largest output recorded of any of this server's tools, unless a tool's overlay says otherwise."""
    max_content_blocks: int = Field(default=MAX_CONTENT_BLOCKS, ge=1, le=_CONTENT_BLOCKS_LIMIT)
    tools: dict[str, ToolOverlay] = Field(min_length=1)
    """Every tool raydag may offer from this server, by the name raydag offers it under; any other tool it
    lists is never offered."""
    resource_check: ResourceCheckSpec | None = None
    """Who may run over which resource, asked before a run that would use this server's tools is created;
    ``None``: the policy alone decides (each call is still checked against the run's resource)."""
    placement: Placement | None = None
    """The nodes its calls may be made from (``tool_executor: callers``); ``None``: any node, callers spread."""

    @field_validator("resource_check")
    @classmethod
    def _check_tool_declared(
        cls, value: ResourceCheckSpec | None, info: ValidationInfo
    ) -> ResourceCheckSpec | None:
        if value is not None and value.tool is not None:
            overlay = info.data.get("tools", {}).get(value.tool)
            if overlay is None:
                raise ValueError(f"tool {value.tool!r} is not one of this server's declared tools")
            if not overlay.run_bound:
                raise ValueError(f"tool {value.tool!r} has no run_bound field to give the resource to")
        return value

    @field_validator("tools")
    @classmethod
    def _operations_name_their_tools(cls, value: dict[str, ToolOverlay]) -> dict[str, ToolOverlay]:
        """A write's reconciling read and compensating write are tools of the same server, of the right risk."""
        for key, overlay in value.items():
            operation = overlay.operation
            if operation is None:
                continue
            if operation.reconcile is not None:
                read = value.get(operation.reconcile.tool)
                if read is None or read.risk is not Risk.READ_ONLY:
                    raise ValueError(
                        f"{key}: reconcile tool {operation.reconcile.tool!r} is not a read_only tool of this server"
                    )
            if operation.compensate is not None:
                undo = value.get(operation.compensate)
                if undo is None or undo.operation is None:
                    raise ValueError(
                        f"{key}: compensate tool {operation.compensate!r} is not a write tool of this server "
                        "with an operation declared"
                    )
        return value

    @field_validator("tools")
    @classmethod
    def _each_server_tool_once(cls, value: dict[str, ToolOverlay]) -> dict[str, ToolOverlay]:
        offered: dict[str, str] = {}
        for key, overlay in value.items():
            name = overlay.name or key
            if name in offered:
                raise ValueError(
                    f"the server's tool {name!r} is offered twice, as {offered[name]!r} and {key!r}"
                )
            offered[name] = key
        return value

    @property
    def largest_output_bytes(self) -> int:
        """The largest output any of this server's tools may record."""
        return max(overlay.max_output_bytes or self.max_output_bytes for overlay in self.tools.values())

    def server_name(self, tool: str) -> str:
        """The name on the server of the tool raydag offers as ``tool``."""
        overlay = self.tools.get(tool)
        return overlay.name if overlay is not None and overlay.name else tool

    @property
    def renames(self) -> dict[str, str]:
        """The server's name → the offered name, for each tool offered under another name."""
        return {
            overlay.name: key for key, overlay in self.tools.items() if overlay.name and overlay.name != key
        }

    @field_validator("protocol", mode="before")
    @classmethod
    def _unquoted_date(cls, value: Any) -> Any:
        return value.isoformat() if isinstance(value, date) else value  # YAML reads 2025-11-25 as a date


class HttpServer(_Server):
    """A server reached over Streamable HTTP."""

    transport: Literal["streamable-http"]
    url: str
    auth: Auth = NoAuth()

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_shorthand(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        value = _interpolated(value, info)
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not carry credentials: use auth")
        return value


class StdioServer(_Server):
    """A server raydag runs as a child process of each caller actor, speaking MCP on stdin and stdout."""

    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str | FromEnv] = Field(default_factory=dict)
    """Added to a minimal inherited environment; ``{from_env: NAME}`` copies the caller's variable."""
    cwd: Path | None = None
    auth: NoAuth = NoAuth()
    """A child process has no HTTP headers: it is trusted as the process that started it is."""

    @field_validator("auth", mode="before")
    @classmethod
    def _auth_shorthand(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value

    @field_validator("command", "cwd", mode="before")
    @classmethod
    def _expand(cls, value: Any, info: ValidationInfo) -> Any:
        return _interpolated(value, info) if isinstance(value, str) else value

    @field_validator("args", mode="before")
    @classmethod
    def _expand_args(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, list):
            return [_interpolated(item, info) if isinstance(item, str) else item for item in value]
        return value


ServerSpec = Annotated[HttpServer | StdioServer, Field(discriminator="transport")]
"""One MCP server of a toolsets file."""


_IMPORT_PATH = r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"


class Migrations(_Strict):
    """A toolset's own tables: ``package``'s ``migrations/*.sql``, recorded in ``table`` (apart from raydag's)."""

    package: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.]*$")
    table: str = Field(pattern=r"^[a-z_][a-z0-9_]{0,62}$")


class DemoAct(_Strict):
    """What ``raydag demo --act`` runs: a run over ``resource`` in ``stage``, whose writes a person at the
    terminal approves or rejects."""

    resource: dict[str, str] = Field(min_length=1)
    stage: str = Field(min_length=1)


class Demo(_Strict):
    """What ``raydag demo`` runs: a run over ``resource`` with the toolset's own planner; ``act``, what
    ``raydag demo --act`` runs."""

    resource: dict[str, str] = Field(min_length=1)
    goal: str | None = None
    act: DemoAct | None = None


class Hosting(_Strict):
    """What raydag does for a toolset whose server it hosts itself (the shipped caseops), each thing named,
    never imported by the runtime's code: the server, served where ``RAYDAG_MCP_URL`` is unset (at
    ``/mcp``); the tables it needs in the database raydag prepares; how ``raydag seed`` loads its data; and
    what ``raydag demo`` runs. The contract of each name is in docs/TOOLSETS.md ("Hosting a toolset")."""

    server: str | None = Field(default=None, pattern=_IMPORT_PATH)
    """``package.module:factory``, called with keywords ``dsn``, ``tokens`` (``dag.tokens.TaskTokens``),
    ``latency_ms``, ``pool_size``, ``allowed_hosts``, ``allowed_origins``; it returns a server with ``asgi``
    (the MCP endpoint), ``asgi_app()`` (an app answering at ``/mcp``, with its lifespan) and ``lifespan()``."""
    migrations: Migrations | None = None
    seed: str | None = Field(default=None, pattern=_IMPORT_PATH)
    """``package.module:function``, awaited as ``load(connection, path)``: the data of the seed file at
    ``path`` (``None``: the toolset's demo data) into the database; returns rows written per table."""
    demo: Demo | None = None


class Toolsets(_Strict):
    """A loaded, validated toolsets file."""

    version: Literal[1] = 1
    planner: str | None = Field(default=None, pattern=_IMPORT_PATH)
    """The toolset's own planner, ``package.module:ClassName``: offered beside the built-in ones, and the
    planner of a run that names none and supplies no plan (caseops names its ``conformance`` planner)."""
    hosting: Hosting | None = None
    """What raydag runs for this toolset's server when it hosts it itself; ``None``: the servers run elsewhere."""
    servers: tuple[ServerSpec, ...] = Field(min_length=1)

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope the overlays declare: what a development key, the CLI's operator and the Python API act
        with."""
        return frozenset(overlay.scope for server in self.servers for overlay in server.tools.values())

    @property
    def resource_keys(self) -> frozenset[str]:
        """Every resource key an overlay binds a tool's input to (caseops: ``case_id``)."""
        return frozenset(
            binding.resource
            for server in self.servers
            for overlay in server.tools.values()
            for binding in overlay.run_bound.values()
        )

    @model_validator(mode="after")
    def _unique_names(self) -> Toolsets:
        servers: set[str] = set()
        tools: dict[str, str] = {}
        for server in self.servers:
            if server.name in servers:
                raise ValueError(f"two servers are named {server.name!r}")
            servers.add(server.name)
            for tool in server.tools:
                if tool in tools:
                    raise ValueError(
                        f"tool {tool!r} is declared by both {tools[tool]!r} and {server.name!r}: offer one of them "
                        f"under another key, with `name: {server.server_name(tool)}`"
                    )
                tools[tool] = server.name
        return self

    def server(self, name: str) -> HttpServer | StdioServer:
        """The server named ``name``; ``KeyError`` if there is none."""
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(name)

    @property
    def tool_servers(self) -> dict[str, str]:
        """Each declared tool's server."""
        return {tool: server.name for server in self.servers for tool in server.tools}


def parse_toolsets(text: str, source: str, variables: Mapping[str, str] | None = None) -> Toolsets:
    """Validate a toolsets document; ``ToolsetsInvalid`` names ``source``, the line and the field."""
    document: LocatedYaml = parse_located(text, source)
    _check_unique_names(document)
    context = {"variables": os.environ if variables is None else variables}
    try:
        return Toolsets.model_validate(document.value, context=context)
    except ValidationError as exc:
        raise located_error(exc, document) from None


def _check_unique_names(document: LocatedYaml) -> None:
    """Duplicate server and tool names, placed at their second use (the model checks them too, unplaced)."""
    servers = document.value.get("servers")
    if not isinstance(servers, list):
        return
    names: set[str] = set()
    tools: dict[str, str] = {}
    for index, server in enumerate(servers):
        if not isinstance(server, dict):
            continue
        name = server.get("name")
        if isinstance(name, str) and name in names:
            line = document.line_of(("servers", index, "name"))
            raise ToolsetsInvalid(document.source, line, f"servers[{index}].name", f"{name!r} is used twice")
        names.add(str(name))
        declared = server.get("tools")
        overlays: dict[str, Any] = declared if isinstance(declared, dict) else {}
        for tool, overlay in overlays.items():
            if tool in tools:
                line = document.line_of(("servers", index, "tools", tool))
                remote = overlay.get("name", tool) if isinstance(overlay, dict) else tool
                message = (
                    f"{tool!r} is declared by {tools[tool]!r} already: a tool name is unique across servers, "
                    f"so offer this one under another key, with `name: {remote}`"
                )
                raise ToolsetsInvalid(document.source, line, f"servers[{index}].tools.{tool}", message)
            tools[tool] = str(name)


def load_toolsets(path: str | Path, variables: Mapping[str, str] | None = None) -> Toolsets:
    """Read and validate the toolsets file at ``path`` (or ``package:file``, a file a Python package ships,
    such as the shipped toolsets, ``mcp_server:caseops.yaml``). ``${NAME}`` in ``url``, ``command``, ``args``
    and ``cwd`` comes from ``variables`` (default: the environment)."""
    source = str(path)
    try:
        text = _located(path).read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ToolsetsInvalid(source, None, None, f"cannot be read ({reason})") from None
    return parse_toolsets(text, source, variables)


_PACKAGED = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*):([A-Za-z0-9_][A-Za-z0-9_./-]*\.ya?ml)$")


def _located(path: str | Path) -> Path:
    """``path`` itself, or the file ``package:file`` names inside an installed package."""
    packaged = _PACKAGED.match(str(path)) if isinstance(path, str) and not Path(path).exists() else None
    if packaged is None:
        return Path(path)
    try:
        return Path(str(resources.files(packaged.group(1)).joinpath(packaged.group(2))))
    except ModuleNotFoundError:
        return Path(path)  # read as a path, and reported as one that cannot be read


def configured_toolsets(environ: Mapping[str, str] | None = None) -> Toolsets | None:
    """The file ``RAYDAG_TOOLSETS`` names, loaded; ``None`` when it is unset."""
    environ = os.environ if environ is None else environ
    path = environ.get(TOOLSETS_ENV, "").strip()
    return load_toolsets(path, environ) if path else None

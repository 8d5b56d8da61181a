"""The toolsets file: a valid one loads with its defaults; every malformed one fails at load, naming the file,
the line and the field, and never repeating a secret it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.launch.settings import shipped_toolsets
from actors.toolsets._yaml_lines import ToolsetsInvalid
from actors.toolsets.config import (
    BearerAuth,
    HttpServer,
    NoAuth,
    OAuthClientCredentials,
    RaydagTokenAuth,
    ResourceCheckSpec,
    StdioServer,
    configured_toolsets,
    load_toolsets,
    parse_toolsets,
)
from dag.contracts import BindingMatch, Recording, Risk
from dag.writes import Intent

VALID = """\
version: 1
servers:
  - name: files
    transport: stdio
    command: node
    args: ["server.js", "${ROOT}"]
    env: {LOG: quiet, HOME: {from_env: HOME}}
    tools:
      read_text_file:
        scope: files:read
        risk: read_only
        run_bound: {path: {resource: root, match: path_within}}
      list_directory:
        scope: files:read
        risk: read_only
        timeout_s: 5
        recording: digest
        run_bound: {path: root}
  - name: everything
    transport: streamable-http
    url: https://everything.example/mcp
    protocol: 2025-11-25
    auth: {mode: bearer, env: EVERYTHING_TOKEN}
    max_concurrency: 4
    timeouts: {connect_s: 5, call_s: 20}
    tools:
      echo: {scope: demo:read, risk: read_only, observed_bound: [message], max_attempts: 2}
  - name: caseops
    transport: streamable-http
    url: ${RAYDAG_MCP_URL}
    auth: raydag-token
    tools:
      caseops_get_case_snapshot: {scope: cases:read, risk: read_only, run_bound: {case_id: case_id}}
"""
VARIABLES = {"ROOT": "/srv/reports", "RAYDAG_MCP_URL": "https://caseops.example/mcp"}


def test_a_valid_file_loads_with_every_field_and_default(tmp_path: Path) -> None:
    path = tmp_path / "toolsets.yaml"
    path.write_text(VALID)

    toolsets = load_toolsets(path, VARIABLES)

    files, everything, caseops = toolsets.servers
    assert isinstance(files, StdioServer)
    assert files.args == ("server.js", "/srv/reports")
    assert files.protocol == "auto"
    assert files.auth == NoAuth()
    assert files.max_concurrency == 16
    assert (files.timeouts.connect_s, files.timeouts.call_s) == (10.0, 10.0)
    read = files.tools["read_text_file"]
    assert (read.scope, read.risk, read.max_attempts, read.recording) == (
        "files:read",
        Risk.READ_ONLY,
        3,
        "full",
    )
    assert read.run_bound["path"].match is BindingMatch.PATH_WITHIN
    listing = files.tools["list_directory"]
    assert (listing.timeout_s, listing.recording) == (5.0, Recording.DIGEST)
    assert (listing.run_bound["path"].resource, listing.run_bound["path"].match) == (
        "root",
        BindingMatch.EQUALS,
    )
    assert isinstance(everything, HttpServer)
    assert everything.auth == BearerAuth(env="EVERYTHING_TOKEN")
    assert (everything.protocol, everything.max_concurrency, everything.timeouts.call_s) == (
        "2025-11-25",
        4,
        20.0,
    )
    assert everything.tools["echo"].observed_bound == frozenset({"message"})
    assert isinstance(caseops, HttpServer)
    assert (caseops.url, caseops.auth) == ("https://caseops.example/mcp", RaydagTokenAuth())
    assert toolsets.tool_servers["echo"] == "everything"


def test_a_resource_check_names_a_callable_or_a_declared_tool_and_the_shipped_caseops_one_a_callable() -> (
    None
):
    by_tool = parse_toolsets(
        VALID + "    resource_check: {tool: caseops_get_case_snapshot}\n", "t.yaml", VARIABLES
    )
    by_callable = parse_toolsets(
        VALID + "    resource_check: {callable: 'os.path:isdir'}\n", "t.yaml", VARIABLES
    )

    assert by_tool.server("caseops").resource_check == ResourceCheckSpec(tool="caseops_get_case_snapshot")
    assert by_callable.server("caseops").resource_check == ResourceCheckSpec(callable="os.path:isdir")
    assert by_tool.server("files").resource_check is None
    shipped = shipped_toolsets("http://127.0.0.1:1/mcp").server("caseops").resource_check
    assert shipped == ResourceCheckSpec(callable="mcp_server.resource_check:case_of_tenant")


def test_the_environment_variable_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "toolsets.yaml"
    path.write_text(VALID)

    assert configured_toolsets({}) is None
    loaded = configured_toolsets({"RAYDAG_TOOLSETS": str(path), **VARIABLES})
    assert loaded is not None
    assert [server.name for server in loaded.servers] == ["files", "everything", "caseops"]


def invalid(text: str, variables: dict[str, str] | None = None) -> ToolsetsInvalid:
    with pytest.raises(ToolsetsInvalid) as caught:
        parse_toolsets(text, "toolsets.yaml", VARIABLES if variables is None else variables)
    return caught.value


def replaced(old: str, new: str) -> str:
    assert old in VALID
    return VALID.replace(old, new, 1)


def line_of(text: str, marker: str) -> int:
    """The line (1-based) where ``marker`` first occurs in ``text``; a leading newline is skipped."""
    return text[: text.index(marker)].count("\n") + 1 + marker.startswith("\n")


CASES = [
    (
        replaced(
            "risk: read_only\n        run_bound: {path: {", "risk: readonly\n        run_bound: {path: {"
        ),
        "risk: readonly",
        "servers[0].tools.read_text_file.risk",
        "Input should be 'read_only'",
    ),
    (
        replaced(
            "        scope: files:read\n        risk: read_only\n        timeout_s",
            "        risk: read_only\n        timeout_s",
        ),
        "list_directory:",
        "servers[0].tools.list_directory.scope",
        "Field required",
    ),
    (
        replaced("transport: stdio", "transport: pipe"),
        "transport: pipe",
        "servers[0].transport",
        "must be one of",
    ),
    (replaced("    command: node\n", ""), "name: files", "servers[0].command", "Field required"),
    (
        replaced("url: https://everything.example/mcp", "url: ftp://example.org/mcp"),
        "ftp://",
        "servers[1].url",
        "http:// or https://",
    ),
    (
        replaced("url: https://everything.example/mcp", "url: https://user:hunter2@example.org/mcp"),
        "hunter2",
        "servers[1].url",
        "must not carry credentials",
    ),
    (
        replaced("{mode: bearer, env: EVERYTHING_TOKEN}", "{mode: bearer, env: A, file: /run/t}"),
        "auth:",
        "servers[1].auth",
        "exactly one of env and file",
    ),
    (
        replaced("{mode: bearer, env: EVERYTHING_TOKEN}", "{mode: basic}"),
        "mode: basic",
        "servers[1].auth.mode",
        "mode must be one of",
    ),
    (
        replaced("max_concurrency: 4", "max_concurrency: 0"),
        "max_concurrency",
        "servers[1].max_concurrency",
        "greater than or equal to 1",
    ),
    (
        replaced("timeouts: {connect_s: 5, call_s: 20}", "timeouts: {connect: 5}"),
        "timeouts:",
        "servers[1].timeouts.connect",
        "Extra inputs are not permitted",
    ),
    (
        replaced("observed_bound: [message], max_attempts: 2", "observed_bound: message"),
        "echo:",
        "servers[1].tools.echo.observed_bound",
        "valid frozenset",
    ),
    (
        replaced("  - name: everything", "  - name: files2\n    name: files"),
        "\n    name: files\n",
        "servers[1].name",
        "is given twice",
    ),
    (
        replaced("  - name: everything", "  - name: files"),
        "\n  - name: files\n    transport: streamable",
        "servers[1].name",
        "'files' is used twice",
    ),
    (
        replaced("      echo:", "      read_text_file:"),
        "read_text_file: {",
        "servers[1].tools.read_text_file",
        "declared by 'files' already",
    ),
    (
        replaced("url: ${RAYDAG_MCP_URL}", "url: ${MCP_URL_TYPO}"),
        "MCP_URL_TYPO",
        "servers[2].url",
        "variables that are not set: MCP_URL_TYPO",
    ),
    (
        replaced("run_bound: {case_id: case_id}", "run_bound: {case_id: case_id}, observed_bound: [case_id]"),
        "caseops_get_case_snapshot",
        "servers[2].tools.caseops_get_case_snapshot",
        "both run-bound and observed-bound",
    ),
    (
        replaced("    auth: raydag-token\n", "    auth: raydag-token\n    headers: {X-Api-Key: abc}\n"),
        "headers:",
        "servers[2].headers",
        "Extra inputs are not permitted",
    ),
    (
        replaced("    tools:\n      echo", "    tools: {}\n    unused:\n      echo"),
        "tools: {}",
        "servers[1].tools",
        "at least 1 item",
    ),
    (VALID.replace("version: 1", "version: 2"), "version", "version", "Input should be 1"),
    (
        VALID + "    resource_check: {callable: no_such_module:check}\n",
        "resource_check",
        "servers[2].resource_check.callable",
        "cannot be imported (ModuleNotFoundError",
    ),
    (
        VALID + "    resource_check: {callable: not a path}\n",
        "resource_check",
        "servers[2].resource_check.callable",
        "should match pattern",
    ),
    (
        VALID + "    resource_check: {tool: caseops_list_everything}\n",
        "resource_check",
        "servers[2].resource_check",
        "'caseops_list_everything' is not one of this server's declared tools",
    ),
    (
        VALID + "    resource_check: {tool: caseops_get_case_snapshot, callable: 'os:getcwd'}\n",
        "resource_check",
        "servers[2].resource_check",
        "exactly one of callable and tool",
    ),
    (
        replaced("    tools:\n      echo:", "    resource_check: {tool: echo}\n    tools:\n      echo:"),
        "resource_check",
        "servers[1].resource_check",
        "has no run_bound field",
    ),
    ("servers: [\n", 2, None, "is not valid YAML"),
    ("- just\n- a list\n", "just", None, "must be a mapping"),
    ("", None, None, "is empty"),
]


@pytest.mark.parametrize(("text", "marker", "field", "message"), CASES)
def test_a_malformed_file_names_the_file_the_line_and_the_field(
    text: str, marker: str | int | None, field: str | None, message: str
) -> None:
    error = invalid(text)

    assert (error.source, error.field) == ("toolsets.yaml", field)
    assert message in error.message
    assert error.line == (line_of(text, marker) if isinstance(marker, str) else marker)
    assert str(error).startswith(f"toolsets.yaml:{error.line}: " if error.line else "toolsets.yaml: ")


def test_a_stdio_server_cannot_take_http_auth() -> None:
    text = replaced("    command: node\n", "    command: node\n    auth: raydag-token\n")
    error = invalid(text)

    assert (error.line, error.field) == (line_of(text, "auth: raydag-token"), "servers[0].auth.mode")


@pytest.mark.parametrize("key", ["token", "secret", "value"])
def test_a_secret_written_in_the_file_is_refused_without_being_repeated(key: str) -> None:
    text = replaced("{mode: bearer, env: EVERYTHING_TOKEN}", f"{{mode: bearer, {key}: sk-live-0123}}")
    error = invalid(text)

    assert (error.line, error.field) == (line_of(text, "sk-live"), "servers[1].auth")
    assert "never written in the toolsets file" in error.message
    assert "sk-live-0123" not in str(error)


def test_every_problem_of_a_file_is_listed_first_by_line() -> None:
    text = replaced("risk: read_only\n        timeout_s", "risk: reads\n        timeout_s").replace(
        "max_concurrency: 4", "max_concurrency: -1"
    )

    error = invalid(text)

    assert error.line == line_of(text, "risk: reads")
    assert [line.split(":")[1] for line in error.more] == [str(line_of(text, "max_concurrency"))]


def test_oauth_client_credentials_name_the_client_the_issuer_and_where_the_secret_is() -> None:
    text = replaced(
        "{mode: bearer, env: EVERYTHING_TOKEN}",
        "{mode: oauth-client-credentials, client_id: raydag, issuer: 'https://auth.example', file: /run/s}",
    )

    server = parse_toolsets(text, "toolsets.yaml", VARIABLES).servers[1]

    assert isinstance(server, HttpServer)
    assert isinstance(server.auth, OAuthClientCredentials)
    assert (server.auth.client_id, server.auth.issuer, str(server.auth.file)) == (
        "raydag",
        "https://auth.example",
        "/run/s",
    )
    assert server.auth.token_endpoint_auth == "client_secret_basic"
    refused = invalid(text.replace("file: /run/s", "client_secret: s3cr3t-value"))
    assert "never written in the toolsets file" in refused.message
    assert "s3cr3t-value" not in str(refused)


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ToolsetsInvalid, match=r"missing\.yaml: cannot be read"):
        load_toolsets(tmp_path / "missing.yaml")


def test_one_server_tool_cannot_be_offered_under_two_names() -> None:
    text = replaced(
        "    tools:\n      echo:",
        "    tools:\n      again: {name: echo, scope: toy:read, risk: read_only}\n      echo:",
    )
    error = invalid(text)

    assert error.field == "servers[1].tools"
    assert "the server's tool 'echo' is offered twice, as 'again' and 'echo'" in error.message


def test_two_servers_offering_one_name_are_told_to_rename_one() -> None:
    more = "  - name: more\n    transport: stdio\n    command: node\n    tools:\n"
    text = VALID + more + "      echo: {scope: toy:read, risk: read_only}\n"
    error = invalid(text)

    assert error.field == "servers[3].tools.echo"
    assert "'echo' is declared by 'everything' already" in error.message
    assert "with `name: echo`" in error.message


WRITE_TOOL = """\
servers:
  - name: files
    transport: stdio
    command: node
    tools:
      read_text_file: {scope: files:read, risk: read_only}
      write_file:
        scope: files:write
        risk: {risk}
        run_bound: {run_bound}
        operation: {operation}
"""


def write_tool(
    risk: str = "reversible_write", operation: str = "{approval: person}", run_bound: str = "{}"
) -> str:
    return (
        WRITE_TOOL.replace("{risk}", risk).replace("{operation}", operation).replace("{run_bound}", run_bound)
    )


def test_an_operation_id_carried_in_meta_names_no_argument() -> None:
    [server] = parse_toolsets(write_tool(operation="{idempotency_key: _meta}"), "toolsets.yaml", {}).servers
    operation = server.tools["write_file"].operation
    assert operation is not None

    spec = operation.spec()

    assert (spec.key.value, spec.key_argument) == ("meta", None)


def test_a_write_tools_operation_loads_with_its_defaults() -> None:
    [server] = parse_toolsets(write_tool(), "toolsets.yaml", {}).servers
    operation = server.tools["write_file"].operation

    assert operation is not None
    spec = operation.spec()
    assert (spec.approval.value, spec.key.value, spec.reconcile) == ("person", "none", None)
    assert spec.approval_window_s is None  # the run's approval_wait_s


def test_a_write_tools_intent_is_every_argument_forever_unless_the_overlay_narrows_it() -> None:
    [server] = parse_toolsets(write_tool(), "toolsets.yaml", {}).servers
    [narrowed] = parse_toolsets(
        write_tool(
            operation="{intent: {arguments: [path, content], window_s: 86400}}", run_bound="{path: root}"
        ),
        "toolsets.yaml",
        {},
    ).servers
    default, daily = server.tools["write_file"].operation, narrowed.tools["write_file"].operation
    assert default is not None
    assert daily is not None

    assert default.spec().intent == Intent(arguments=None, window_s=None)
    assert daily.spec().intent == Intent(arguments=("content", "path"), window_s=86400)


def test_an_intent_that_leaves_a_bound_argument_out_is_refused_at_its_line() -> None:
    refused = invalid(write_tool(operation="{intent: {arguments: [content]}}", run_bound="{path: root}"), {})

    assert (refused.line, refused.field) == (11, "servers[0].tools.write_file.operation")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (write_tool(risk="read_only"), "operation is declared for a write tool only"),
        # Whether a requester may approve their own run's writes is the tenant's policy, not the tool's.
        (write_tool(operation="{self_approval: true}"), "self_approval"),
        (
            write_tool(operation="{reconcile: {tool: write_file, arguments: {p: path}, exists: e}}"),
            "is not a read_only tool of this server",
        ),
        (
            write_tool(operation="{reconcile: {tool: nowhere, arguments: {p: path}, exists: e}}"),
            "is not a read_only tool of this server",
        ),
        (write_tool(operation="{compensate: read_text_file}"), "is not a write tool of this server"),
        (
            write_tool(operation="{idempotency_key: path}", run_bound="{path: root}"),
            "is set by raydag, so it cannot be bound",
        ),
        (write_tool(operation="{approval: whoever}"), "operation"),
        (
            write_tool(operation="{intent: {arguments: [content]}}", run_bound="{path: root}"),
            "intent.arguments leaves out ['path'], which are bound",
        ),
        (
            write_tool(operation="{idempotency_key: key, intent: {arguments: [key, path]}}"),
            "names 'key', the idempotency_key",
        ),
        (write_tool(operation="{intent: {arguments: [path, path]}}"), "names ['path'] more than once"),
        (write_tool(operation="{intent: {arguments: []}}"), "at least 1 item"),
        (write_tool(operation="{intent: {window_s: 0}}"), "greater than 0"),
        (write_tool(operation="{intent: {window_s: .inf}}"), "finite number"),
        (write_tool(operation="{intent: {within_s: 60}}"), "Extra inputs are not permitted"),
    ],
)
def test_an_operation_that_cannot_hold_is_refused_at_load(text: str, problem: str) -> None:
    assert problem in str(invalid(text, {}))


ONE_SERVER = """\
servers:
  - name: toy
    transport: streamable-http
    url: ${TOY_URL}
    auth: {mode: bearer, env: TOY_TOKEN}
    tools:
      echo: {scope: toy:read, risk: read_only}
"""


@pytest.mark.parametrize(
    ("old", "new", "line", "field", "message"),
    [
        pytest.param(
            "risk: read_only",
            "risk: read_mostly",
            7,
            "servers[0].tools.echo.risk",
            "Input should be 'read_only', 'reversible_write' or 'irreversible_write'",
            id="a-bad-risk",
        ),
        pytest.param(
            "${TOY_URL}",
            "${TOY_UNSET}",
            4,
            "servers[0].url",
            "names variables that are not set: TOY_UNSET",
            id="an-unset-variable",
        ),
        pytest.param(
            "env: TOY_TOKEN",
            "token: sk-live-0123",
            5,
            "servers[0].auth",
            "a secret is never written in the toolsets file: name an env variable or a file",
            id="an-inline-secret",
        ),
    ],
)
def test_the_only_server_failing_is_reported_as_its_own_error_alone(
    tmp_path: Path, old: str, new: str, line: int, field: str, message: str
) -> None:
    """pydantic-core also finds a one-server ``servers`` "too short after validation" once that server fails;
    that consequence, placed on line 1, was reported first."""
    path = tmp_path / "toolsets.yaml"
    path.write_text(ONE_SERVER.replace(old, new))

    with pytest.raises(ToolsetsInvalid) as caught:
        load_toolsets(path, {"TOY_URL": "http://127.0.0.1:9/mcp"})

    assert str(caught.value) == f"{path}:{line}: {field}: {message}"

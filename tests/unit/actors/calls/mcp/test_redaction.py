"""Secrets a server was sent never come back into what raydag keeps: replaced in errors (before they are cut),
outputs and stderr; the secrets are the call's token and the server's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.calls.mcp.redaction import MAX_MESSAGE, REDACTED, Redactor, server_secrets
from actors.calls.mcp.stdio import STDERR_LINE_CHARS, stderr_text
from actors.calls.mcp.stdio_transport import LineFramer
from actors.calls.mcp.watch import CallWatch, Refusal
from actors.toolsets.config import parse_toolsets
from dag.events import ErrorKind, NodeError

SECRET = "s3cr3t-token-value"


def test_every_occurrence_is_replaced_the_longest_secret_first() -> None:
    redactor = Redactor([SECRET, SECRET + "-and-more"])

    assert redactor.text(f"a {SECRET}-and-more b {SECRET}") == f"a {REDACTED} b {REDACTED}"


def test_values_too_short_to_be_credentials_are_not_looked_for() -> None:
    redactor = Redactor(["short", None, ""])

    assert not redactor
    assert redactor.text("short") == "short"


def test_an_error_is_redacted_before_it_is_cut_so_no_part_of_a_secret_survives_the_cut() -> None:
    message = "x" * (MAX_MESSAGE - 5) + SECRET
    error = NodeError(kind=ErrorKind.PROTOCOL, code=SECRET, message=message)

    redacted = Redactor([SECRET]).error(error)

    assert redacted.code == REDACTED
    assert SECRET[:5] not in redacted.message
    assert len(redacted.message) == MAX_MESSAGE


@pytest.mark.parametrize("over", [0, 10_000])
def test_a_stderr_line_is_redacted_before_it_is_cut_so_no_part_of_a_secret_survives_the_cut(
    over: int,
) -> None:
    framer = LineFramer(STDERR_LINE_CHARS * 4)
    [line] = framer.feed(("P" * (STDERR_LINE_CHARS - 4) + SECRET + "e" * over + "\n").encode())

    shown = stderr_text(line, Redactor([SECRET]))

    assert SECRET[:4] not in shown
    assert shown.startswith("P" * (STDERR_LINE_CHARS - 4) + REDACTED[:4] + " [cut: a line of ")


def test_a_short_stderr_line_is_shown_whole_with_its_secrets_redacted() -> None:
    shown = stderr_text(f"ready; my secret is {SECRET}".encode(), Redactor([SECRET]))

    assert shown == f"ready; my secret is {REDACTED}"


def test_an_output_has_its_strings_and_keys_redacted_and_is_kept_as_is_without_secrets() -> None:
    redactor = Redactor([SECRET, 'with"quote-secret'])
    clean = {"a": ["b", 1, None, {"c": 2.5}]}

    assert redactor.value(clean) is clean
    assert redactor.value({SECRET: [f"x{SECRET}", 3], "q": 'with"quote-secret'}) == {
        REDACTED: [f"x{REDACTED}", 3],
        "q": REDACTED,
    }


def test_a_servers_secrets_are_its_bearer_secret_and_its_secret_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bearer").write_text("bearer-secret-value\n")
    monkeypatch.setenv("API_KEY", "api-key-secret-value")
    monkeypatch.setenv("DATA_DIR", "/srv/data/folder")
    toolsets = parse_toolsets(
        f"""\
servers:
  - name: web
    transport: streamable-http
    url: http://127.0.0.1:1/mcp
    auth: {{mode: bearer, file: {tmp_path / "bearer"}}}
    tools: {{t: {{scope: s, risk: read_only}}}}
  - name: local
    transport: stdio
    command: server
    env: {{API_KEY: {{from_env: API_KEY}}, DATA_DIR: {{from_env: DATA_DIR, secret: false}}, MODE: fast}}
    tools: {{u: {{scope: s, risk: read_only}}}}
  - name: gone
    transport: streamable-http
    url: http://127.0.0.1:1/mcp
    auth: {{mode: bearer, env: UNSET_VARIABLE}}
    tools: {{v: {{scope: s, risk: read_only}}}}
""",
        "t.yaml",
        {},
    )

    assert [server_secrets(server) for server in toolsets.servers] == [
        ["bearer-secret-value"],
        ["api-key-secret-value"],
        [],
    ]


def test_the_refusal_that_stands_for_a_call_is_its_own_never_a_refused_event_stream() -> None:
    watch = CallWatch(
        refusals=[
            Refusal(405, "", "GET"),
            Refusal(401, "Bearer", "initialize"),
            Refusal(500, "", "tools/call"),
        ]
    )

    assert watch.refusal() == Refusal(500, "", "tools/call")
    assert CallWatch(refusals=[Refusal(405, "", "GET")]).refusal() is None
    assert CallWatch(refusals=[Refusal(405, "", "GET"), Refusal(401, "", "initialize")]).refusal() == Refusal(
        401, "", "initialize"
    )

"""Interoperability, checked with other people's code: the official MCP conformance suite against the server in
both eras, the TypeScript SDK clients (v2 at 2026-07-28, v1 over 2025-11-25) and the MCP Inspector CLI.

The Node tools are pinned in ``tests/node`` and installed by ``make node`` (which ``make test`` runs first).
The suite cannot send an Authorization header, so it runs against a server whose authentication is switched
off by the test-only setting, on loopback; the SDK clients and the Inspector send task tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from mcp_server.auth import ASGIApp
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.server import MCP_PATH, ToolServer, ToolServerConfig
from mcp_server.tokens import TaskTokens
from tests.c102 import CASE_OUTPUT
from tests.conftest import REPO
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_client import Recorder
from tests.integration.test_mcp_server import serving

pytestmark = pytest.mark.conformance

NODE_DIR = REPO / "tests" / "node"
BIN = NODE_DIR / "node_modules" / ".bin"
SUITE_TIMEOUT_S = 240

MODERN_SCENARIOS = (
    "server-stateless",
    "tools-list",
    "dns-rebinding-protection",
    "caching",
    "http-header-validation",
    "sep-2164-resource-not-found",
    "resources-list",
)
LEGACY_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "server-session-lifecycle",
    "resources-list",
)
NOT_TESTABLE = {
    ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): "test_missing_capability",
    ("server-stateless", "sep-2575-missing-capability-http-400"): "test_missing_capability",
    (
        "server-stateless",
        "sep-2575-http-server-no-independent-requests-on-stream",
    ): "test_streaming_elicitation",
    ("server-stateless", "sep-2575-server-no-log-without-loglevel"): "test_logging_tool",
}
"""Checks that need a diagnostic tool of the suite's "everything server", which a caseops server does not
have: the suite reports each as a FAILURE that begins "Not testable". Anything else failing fails the test."""
PASSING = {"SUCCESS", "INFO", "SKIPPED"}


def node_env(home: Path) -> dict[str, str]:
    """The pinned Node first on PATH; a writable HOME (the Inspector keeps a catalog there)."""
    if not (BIN / "node").exists():
        pytest.fail(f"the pinned Node tools are not installed in {NODE_DIR}: run `make node`")
    return {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "NO_COLOR": "1",
    }


class _LoopbackServer:
    """uvicorn on a thread, with keep-alive longer than Node's client-side idle timeout: with uvicorn's 5 s
    default, a loaded machine lets the server close a connection Node is about to reuse ("fetch failed")."""

    def __init__(self, app: Any) -> None:
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", timeout_keep_alive=75)
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="conformance-server")

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the conformance server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}{MCP_PATH}"

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def open_server_url(dsn: str) -> Iterator[str]:
    """A server without authentication, for the suite only, on loopback."""
    tokens = TaskTokens(key=b"unused-without-authentication!!!", audience="http://127.0.0.1/mcp")
    server = ToolServer(ToolServerConfig(dsn=dsn, tokens=tokens, insecure_disable_auth_for_tests=True))
    with _LoopbackServer(server.asgi_app()) as url:
        yield url


@pytest.fixture(scope="module")
def suite_results(
    open_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], Any]:
    """Every scenario of both eras, run four at a time: (spec version, scenario) → the suite's checks."""
    home = tmp_path_factory.mktemp("node-home")
    env = node_env(home)
    runs = [("2026-07-28", scenario) for scenario in MODERN_SCENARIOS] + [
        ("2025-11-25", scenario) for scenario in LEGACY_SCENARIOS
    ]

    def run(version: str, scenario: str) -> Any:
        output = tmp_path_factory.mktemp(f"conformance-{version}-{scenario}")
        options = ("--scenario", scenario, "--spec-version", version, "-o", str(output))
        completed = subprocess.run(
            [str(BIN / "conformance"), "server", "--url", open_server_url, *options],
            env=env,
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=SUITE_TIMEOUT_S,
        )
        found = list(output.glob("*/checks.json"))
        assert found, (
            f"{scenario} at {version} wrote no results:\n{completed.stdout[-3000:]}{completed.stderr}"
        )
        return json.loads(found[0].read_text())

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(run, *key) for key in runs}
        return {key: future.result() for key, future in futures.items()}


def _verdict(scenario: str, checks: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(check ids that failed unexpectedly, check ids known not testable that did something else)."""
    unexpected, changed = [], []
    for check in checks:
        known = NOT_TESTABLE.get((scenario, check["id"]))
        if known is not None:
            message = check.get("errorMessage") or ""
            if check["status"] != "FAILURE" or not message.startswith("Not testable") or known not in message:
                changed.append(f"{check['id']}: {check['status']} {message[:200]}")
        elif check["status"] not in PASSING:
            unexpected.append(f"{check['id']}: {check['status']} {(check.get('errorMessage') or '')[:300]}")
    return unexpected, changed


@pytest.mark.parametrize(
    ("version", "scenario"),
    [("2026-07-28", scenario) for scenario in MODERN_SCENARIOS]
    + [("2025-11-25", scenario) for scenario in LEGACY_SCENARIOS],
)
def test_the_official_conformance_scenario_passes(
    suite_results: dict[tuple[str, str], Any], version: str, scenario: str
) -> None:
    checks = suite_results[(version, scenario)]
    unexpected, changed = _verdict(scenario, checks)

    assert unexpected == []
    assert changed == []
    if scenario == "server-session-lifecycle":  # a stateless server issues no session to check
        assert [check["id"] for check in checks] == ["server-session-lifecycle-skipped"]
    else:
        assert any(check["status"] == "SUCCESS" for check in checks)


def test_the_open_server_is_open_only_because_the_suite_needs_it(open_server_url: str) -> None:
    import httpx

    listed = httpx.post(
        open_server_url,
        headers={"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "caseops_get_case_snapshot"},
        },
        timeout=10,
    )

    assert listed.json()["result"]["structuredContent"]["error"]["code"] == "UNAUTHENTICATED"


def run_node_client(
    script: str, server: RunningToolServer, home: Path, tool: str = "caseops_get_case_snapshot"
) -> Any:
    env = {
        **node_env(home),
        "MCP_URL": server.url,
        "MCP_TOKEN": server.token(tool),
        "MCP_TOOL": tool,
        "MCP_ARGS": json.dumps({"case_id": "C-102"}),
    }
    completed = subprocess.run(
        [str(BIN / "node"), script], env=env, cwd=NODE_DIR, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("script", "version"),
    [("client-2026.mjs", "2026-07-28"), ("client-2025.mjs", "2025-11-25")],
    ids=["client-v2-2026", "sdk-v1-2025"],
)
def test_the_typescript_sdk_clients_list_and_call_the_tools_with_a_token(
    tool_server: RunningToolServer, tmp_path: Path, script: str, version: str
) -> None:
    answer = run_node_client(script, tool_server, tmp_path)

    assert answer["protocolVersion"] == version
    assert set(answer["tools"]) == set(CASEOPS_TOOLS)
    assert answer["result"]["isError"] is False
    assert answer["result"]["structuredContent"] == CASE_OUTPUT


@pytest.mark.parametrize(("era", "handshake"), [("modern", "server/discover"), ("legacy", "initialize")])
def test_the_inspector_cli_lists_the_tools_in_both_eras(
    dsn: str, token_key: bytes, tmp_path: Path, era: str, handshake: str
) -> None:
    recorders: list[Recorder] = []

    def wrap(app: ASGIApp) -> ASGIApp:
        recorders.append(Recorder(app))
        return recorders[0]

    with serving(dsn, token_key, wrap=wrap) as server:
        authorization = f"Authorization: Bearer {server.token('caseops_get_case_snapshot')}"
        options = ("--protocol-era", era, "--method", "tools/list", "--format", "json", "-q")
        completed = subprocess.run(
            [
                str(BIN / "node"),
                str(BIN / "mcp-inspector"),
                "--cli",
                server.url,
                "--transport",
                "http",
                *options,
                "--header",
                authorization,
            ],
            env=node_env(tmp_path),
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert completed.returncode == 0, completed.stderr[-3000:]
    listed = json.loads(completed.stdout)["result"]["tools"]
    assert {tool["name"] for tool in listed} == set(CASEOPS_TOOLS)
    assert handshake in recorders[0].methods
    assert "tools/list" in recorders[0].methods

"""Interoperability, checked with other people's code: the official MCP conformance suite against the server in
both eras, the TypeScript SDK clients (v2 at 2026-07-28, v1 over 2025-11-25) and the MCP Inspector CLI.

Every server scenario of the suite runs in both spec versions; each check must succeed unless
``conformance_baseline`` lists it, with the status the suite reports and the reason it cannot succeed here.

The Node tools are pinned in ``tests/node`` and installed by ``make node`` (which ``make test`` runs first).
The suite cannot send an Authorization header, so it runs against a server whose authentication is switched
off by the test-only setting, on loopback; the SDK clients and the Inspector send task tokens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from dag.tokens import TaskTokens
from mcp_server.auth import ASGIApp
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import CASEOPS_TOOLS
from mcp_server.server import MCP_PATH, ToolServer
from tests.c102 import CASE_OUTPUT
from tests.conftest import REPO
from tests.integration.conformance_baseline import EXPECTED, SCENARIOS, SPEC_VERSIONS
from tests.integration.conftest import RunningToolServer
from tests.integration.test_mcp_client import Recorder
from tests.integration.test_mcp_server import serving

pytestmark = pytest.mark.conformance

NODE_DIR = REPO / "tests" / "node"
BIN = NODE_DIR / "node_modules" / ".bin"
SUITE_TIMEOUT_S = 240


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


_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@pytest.fixture(scope="module")
def suite_results(
    open_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every scenario of each spec version, one run of the suite per version: (version, scenario) → checks."""
    env = node_env(tmp_path_factory.mktemp("node-home"))

    def run(version: str) -> dict[tuple[str, str], list[dict[str, Any]]]:
        output = tmp_path_factory.mktemp(f"conformance-{version}")
        options = ("--suite", "all", "--spec-version", version, "-o", str(output))
        completed = subprocess.run(  # exits non-zero when a check fails: the checks say which
            [str(BIN / "conformance"), "server", "--url", open_server_url, *options],
            env=env,
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=SUITE_TIMEOUT_S,
        )
        results = {}
        for checks in output.glob("*/checks.json"):
            named = _RESULT_DIR.match(checks.parent.name)
            assert named, f"a result folder the test cannot name: {checks.parent.name}"
            results[(version, named["scenario"])] = json.loads(checks.read_text())
        assert results, (
            f"the suite at {version} wrote no results:\n{completed.stdout[-3000:]}{completed.stderr}"
        )
        return results

    with ThreadPoolExecutor(max_workers=len(SPEC_VERSIONS)) as pool:
        return {key: checks for part in pool.map(run, SPEC_VERSIONS) for key, checks in part.items()}


def _message(check: dict[str, Any]) -> str:
    details = check.get("details") or {}
    return " ".join(
        str(part)
        for part in (
            check.get("errorMessage"),
            details.get("message"),
            details.get("note"),
            check.get("description"),
        )
        if part
    )


@pytest.mark.parametrize("version", SPEC_VERSIONS)
def test_the_suite_lists_exactly_the_scenarios_this_test_runs(tmp_path: Path, version: str) -> None:
    listed = subprocess.run(
        [str(BIN / "conformance"), "list", "--server"],
        env=node_env(tmp_path),
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    scenarios = [
        name
        for name, versions in re.findall(r"^\s*-\s+(\S+)\s+\[([^\]]*)\]", listed, re.MULTILINE)
        if version in versions.split(",")
    ]

    assert scenarios == list(SCENARIOS[version])


@pytest.mark.parametrize(
    ("version", "scenario"),
    [(version, scenario) for version in SPEC_VERSIONS for scenario in SCENARIOS[version]],
)
def test_every_check_of_the_scenario_succeeds_unless_listed_with_the_reason_it_cannot(
    suite_results: dict[tuple[str, str], list[dict[str, Any]]], version: str, scenario: str
) -> None:
    assert (version, scenario) in suite_results, "the suite did not run this scenario"
    checks = suite_results[(version, scenario)]
    expected = {key: entry for key, entry in EXPECTED[version].items() if key[0] == scenario}

    unexpected = []
    for check in checks:
        entry = expected.get((scenario, check["id"]))
        message = _message(check)
        if entry is None and check["status"] != "SUCCESS":
            unexpected.append(f"{check['id']}: {check['status']} {message[:300]}")
        elif entry is not None and (check["status"] != entry.status or entry.says not in message):
            unexpected.append(f"{check['id']}: {check['status']} (listed as {entry.status}) {message[:300]}")
    reported = {(scenario, check["id"]) for check in checks}

    assert unexpected == []
    assert sorted(set(expected) - reported) == []  # a listed check the suite no longer reports
    assert checks  # a scenario that reports nothing checked nothing


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

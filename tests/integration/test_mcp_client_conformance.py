"""raydag's MCP client passes the official conformance suite's client scenarios, driven through the path a
ToolCaller takes (``tests/integration/conformance_client.py``: declare, discover, build contracts, call).

Every scenario the issue names, in each era the suite offers it; the 2025 ones also with ``auto`` (the
server/discover probe refused, the handshake after it); JSON Schema preservation (discovery keeps every
2020-12 keyword); OAuth client credentials with a client secret. ``EXPECTED_FAILURES`` lists each check that
fails on purpose, with the reason; a check failing that is not listed, or a listed one that passes, fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_mcp_conformance import BIN, NODE_DIR, node_env

pytestmark = pytest.mark.conformance

ADAPTER = Path(__file__).with_name("conformance_client.py")
RUNS: tuple[tuple[str, str | None, str | None], ...] = (
    # (scenario, --spec-version, RAYDAG_CONFORMANCE_ERA)
    ("initialize", "2025-11-25", None),
    ("initialize", "2025-11-25", "auto"),
    ("tools_call", "2025-11-25", None),
    ("tools_call", "2025-11-25", "auto"),
    ("tools_call", "2026-07-28", None),
    ("sse-retry", "2025-11-25", None),
    ("sse-retry", "2025-11-25", "auto"),
    ("request-metadata", "2026-07-28", None),
    ("sep-2322-client-request-state", "2026-07-28", None),
    ("json-schema-2020-12-preservation", "2025-11-25", None),
    ("json-schema-2020-12-preservation", "2026-07-28", None),
    ("auth/client-credentials-basic", None, None),
    ("auth/client-credentials-jwt", None, None),
    ("elicitation-sep1034-client-defaults", "2025-11-25", None),
)
INFORMATIONAL = "INFO"
"""An INFO entry records what the suite saw (a request, the server info); it is neither a pass nor a failure."""
EXPECTED_SKIPS = {
    "sep-2575-client-declares-roots-capability": (
        "raydag's client declares no roots: a tool server is never handed a view of the runtime's filesystem"
    ),
    "sep-2575-client-declares-sampling-capability": (
        "raydag's client declares no sampling: a tool server may not make the runtime call a model"
    ),
}
"""Checks the suite skips for raydag's client, each with why it does not apply."""
_DECLINED = (
    "raydag declines an elicitation nobody can answer (this adapter's connections hold no call for a person, as a "
    "Ray task's worker's do not), and no answer may be made up for a person"
)
EXPECTED_FAILURES = {
    ("auth/client-credentials-jwt", "client-credentials-jwt-verified"): (
        "private_key_jwt client authentication is not supported yet (client_secret_basic and _post are)"
    ),
    **{
        ("elicitation-sep1034-client-defaults", check): _DECLINED
        for check in (
            "client-elicitation-sep1034-general",
            "client-elicitation-sep1034-string-default",
            "client-elicitation-sep1034-integer-default",
            "client-elicitation-sep1034-number-default",
            "client-elicitation-sep1034-enum-default",
            "client-elicitation-sep1034-boolean-default",
        )
    },
}
TIMEOUT_S = 180


@pytest.fixture(scope="module")
def client_results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str | None, str | None], Any]:
    """Every run, four at a time: (scenario, version, era) → the suite's checks."""
    env = node_env(tmp_path_factory.mktemp("node-home"))
    command = f"{sys.executable} {ADAPTER}"

    def run(scenario: str, version: str | None, era: str | None) -> Any:
        output = tmp_path_factory.mktemp("client-conformance")
        options = ["--scenario", scenario, "-o", str(output), "--command", command]
        if version is not None:
            options += ["--spec-version", version]
        completed = subprocess.run(
            [str(BIN / "conformance"), "client", *options],
            env={**env, **({"RAYDAG_CONFORMANCE_ERA": era} if era else {})},
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        found = list(output.glob("**/checks.json"))
        assert found, f"{scenario} wrote no results:\n{completed.stdout[-3000:]}{completed.stderr[-2000:]}"
        return json.loads(found[0].read_text())

    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {key: pool.submit(run, *key) for key in RUNS}
        return {key: future.result() for key, future in futures.items()}


@pytest.mark.parametrize(
    ("scenario", "version", "era"), RUNS, ids=["-".join(filter(None, run)) for run in RUNS]
)
def test_the_official_client_scenario_passes_through_raydags_call_path(
    client_results: dict[tuple[str, str | None, str | None], Any],
    scenario: str,
    version: str | None,
    era: str | None,
) -> None:
    checks = client_results[(scenario, version, era)]
    unexpected = [
        f"{check['id']}: {check['status']} {(check.get('errorMessage') or '')[:200]}"
        for check in checks
        if check["status"] not in ("SUCCESS", INFORMATIONAL)
        and (scenario, check["id"]) not in EXPECTED_FAILURES
        and not (check["status"] == "SKIPPED" and check["id"] in EXPECTED_SKIPS)
    ]
    expected_but_passing = [
        check["id"]
        for check in checks
        if (scenario, check["id"]) in EXPECTED_FAILURES and check["status"] != "FAILURE"
    ]

    listed = {check_id for name, check_id in EXPECTED_FAILURES if name == scenario}
    assert unexpected == []
    assert expected_but_passing == []
    assert listed <= {check["id"] for check in checks}  # every listed failure was really checked
    if not listed:
        assert any(check["status"] == "SUCCESS" for check in checks)

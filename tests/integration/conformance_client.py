"""The conformance suite's client under test: raydag's own call path, driven against the suite's servers.

``conformance client --command "python tests/integration/conformance_client.py"`` appends the scenario
server's URL. The adapter declares that server as a toolset (no auth; the era the suite asks for, or
``auto`` for 2026-07-28, where negotiating is what the suite checks; ``RAYDAG_CONFORMANCE_ERA`` overrides
it), lists it through ``discover``, builds
the contracts with ``build_catalogue`` (every listed tool declared read-only), and calls each tool through
``McpConnections.call``: the path a ``ToolCaller`` takes. Each outcome is printed as a JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from actors.calls.call import ToolCall
from actors.calls.mcp import McpConnections
from actors.calls.mcp.discovery import discover
from actors.toolsets.catalogue import build_catalogue
from actors.toolsets.config import parse_toolsets
from actors.toolsets.listing import ToolDefinition
from dag.contracts import ToolContract

SAMPLE: dict[str, Any] = {
    "number": 1,
    "integer": 1,
    "string": "raydag",
    "boolean": True,
    "object": {},
    "array": [],
}


def arguments_for(tool: ToolDefinition, contracts: Mapping[str, ToolContract]) -> dict[str, Any]:
    """A value of each declared property's type (the suite's tools take simple arguments or none).

    A ``schema`` argument is answered with another listed tool's input schema as raydag's contract holds it:
    the suite's ``json_schema_echo`` checks that discovery kept every 2020-12 keyword the server listed."""
    properties = tool.input_schema.get("properties") or {}
    if "schema" in properties:
        focal = next(contract for name, contract in contracts.items() if name != tool.name)
        return {"schema": focal.input_schema}
    return {name: SAMPLE.get(str(schema.get("type")), "raydag") for name, schema in properties.items()}


def oauth_auth(url: str, context: dict[str, Any], scratch: Path) -> str:
    """The ``auth`` of an ``auth/client-credentials-*`` scenario: the client secret in a file, as an operator
    would keep it, and the issuer the operator would have written down (read here from the server's
    protected-resource metadata, RFC 9728)."""
    parts = urlsplit(url)
    well_known = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource"
    answer = httpx.get(well_known + parts.path.rstrip("/"), timeout=10)
    if answer.status_code != 200:
        answer = httpx.get(well_known, timeout=10)
    metadata = answer.json()
    secret = scratch / "client.secret"
    secret.write_text(context["client_secret"])
    secret.chmod(0o600)
    issuer = metadata["authorization_servers"][0]
    return json.dumps(
        {
            "mode": "oauth-client-credentials",
            "client_id": context["client_id"],
            "issuer": issuer,
            "file": str(secret),
        }
    )


def declaration(url: str, era: str, tools: list[str], auth: str = "none") -> str:
    lines = [
        "servers:",
        "  - name: scenario",
        "    transport: streamable-http",
        f"    url: {url}",
        f"    protocol: '{era}'",
        f"    auth: {auth}",
        "    timeouts: {connect_s: 20, call_s: 20}",
        "    tools:",
    ]
    lines += [f"      {json.dumps(name)}: {{scope: conformance, risk: read_only}}" for name in tools]
    return "\n".join(lines) + "\n"


async def main(url: str, scratch: Path) -> int:
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    era = os.environ.get("RAYDAG_CONFORMANCE_ERA") or ("auto" if version >= "2026-07-28" else "2025-11-25")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    auth = oauth_auth(url, context, scratch) if "client_secret" in context else "none"
    probe = parse_toolsets(declaration(url, era, ["probe"], auth), "conformance.yaml", {}).servers[0]
    listing = await discover(probe)
    print(json.dumps({"protocol": listing.protocol_version, "tools": [tool.name for tool in listing.tools]}))
    if not listing.tools:
        return 0
    toolsets = parse_toolsets(
        declaration(url, era, [t.name for t in listing.tools], auth), "conformance.yaml", {}
    )
    contracts = build_catalogue(toolsets, {"scenario": listing}).contracts
    async with McpConnections(toolsets.servers) as connections:
        for tool in listing.tools:
            call = ToolCall(
                "conformance",
                tool.name,
                1,
                tool.name,
                arguments_for(tool, contracts),
                url,
                "",
                20.0,
                server="scenario",
            )
            outcome = await connections.call(call, contracts)
            error = outcome.error.model_dump(mode="json") if outcome.error else None
            print(json.dumps({"tool": tool.name, "output": outcome.output, "error": error}))
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        sys.exit(asyncio.run(main(sys.argv[-1], Path(scratch))))

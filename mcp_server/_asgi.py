"""A JSON answer written straight to ASGI: what the guard refuses with and the direct path answers with."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp_server.auth import Send


async def respond_json(
    send: Send, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> None:
    """``body`` as compact JSON (as the SDK writes its answers) with ``status`` and ``headers``."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *(
                    (name.encode(), value.encode("latin-1", "replace"))
                    for name, value in (headers or {}).items()
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})

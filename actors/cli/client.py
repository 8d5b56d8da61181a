"""The commands' client of a raydag's HTTP API: one request, its JSON answer, and a refusal or an unreachable
API printed in a person's words with the exit code it stands for. Over the standard library, printed without
rich: ``raydag run`` attached, ``continue`` and every command that speaks HTTP start with it (httpx would cost
them ~50 ms, rich another ~50: docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from actors.cli.arguments import DEMO_TENANT
from actors.cli.plain import escape, fail, say
from actors.cli.problems import problem
from actors.cli.report import EXIT_BAD_INPUT, EXIT_RUN_FAILED

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 60
URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
"""What a URL keeps as it is; anything else (a space in a run id typed by hand) is percent-encoded, as httpx
does, so that the API answers it (404) rather than the request failing here."""


def serving_here(
    toolsets: Path | None, tenant: str, api_key: str | None, *, decides: bool = False, doing: str = "made by"
) -> tuple[str | None, str | None]:
    """Where this command's runs are made (its requests sent) when no ``--url`` names a raydag: the raydag
    serving this home with these toolsets (``raydag serve``, ``raydag up``: ``actors.launch.serving``), as
    ``api_key``, or as ``tenant``'s development key when that raydag takes those (its approver's for a command
    that ``decides`` for a person); ``(None, api_key)`` when none serves it. Said on stderr (``doing`` the
    raydag at …). Read from the environment alone: the settings cost half a second."""
    from actors.launch.serving import home_in, key_for, serving_for

    serving = serving_for(os.environ, toolsets)
    if serving is None:
        return None, api_key
    api_key = key_for(serving, tenant, api_key, decides=decides)
    if api_key is None and decides and serving.development_keys:
        fail(
            f"[red]the raydag at {escape(serving.url)} records no approver's key:[/red] it was started before raydag "
            "recorded one (raydag down, then raydag up, records it); or give --api-key (or RAYDAG_API_KEY)",
            EXIT_BAD_INPUT,
        )
    if api_key is None:
        fail(
            f"[red]a raydag serves {escape(str(home_in(os.environ)))} at {escape(serving.url)} with API keys of "
            "its own:[/red] give --api-key (or RAYDAG_API_KEY)"
            + (" to run there, or stop it (raydag down) to run here" if doing == "made by" else ""),
            EXIT_BAD_INPUT,
        )
    say(f"[dim]{doing} the raydag at {escape(serving.url)} (raydag down stops it)[/dim]", stderr=True)
    return serving.url, api_key


_REACHED: dict[bool, tuple[str, str | None]] = {}


def reached(url: str | None, api_key: str | None, *, decides: bool = False) -> tuple[str, str | None]:
    """The raydag a command that speaks HTTP asks, and the key it asks with: ``url`` as given (``--url``,
    ``RAYDAG_URL``), else the one serving this home as ``raydag run`` finds it (its development key, or its
    approver's for a command that ``decides``, unless ``api_key``), else ``DEFAULT_URL``. Found once a command."""
    if url is not None:
        return url, api_key
    if decides not in _REACHED:
        found, key = serving_here(None, DEMO_TENANT, api_key, decides=decides, doing="asking")
        _REACHED[decides] = (found or DEFAULT_URL, key)
    return _REACHED[decides]


def api_request(
    method: str,
    url: str | None,
    path: str,
    api_key: str | None,
    body: Any = None,
    *,
    retryable: Collection[int] = (),
    headers: Mapping[str, str] | None = None,
    decides: bool = False,
) -> Any:
    """The API's JSON answer to one request; a refusal or an unreachable API is printed and exits: 2 for a
    refusal the request must change to avoid, 1 for a 5xx, an unreachable API, or a ``retryable`` status. A
    refusal is printed whole: its detail, then each field at fault and each member the API adds (``known``…).
    ``url`` ``None``: the raydag serving this home (``reached``; ``decides``: as an approver)."""
    from http.client import HTTPException  # here: it imports ssl, which a command's start need not pay for

    found_here = url is None
    url, api_key = reached(url, api_key, decides=decides)
    if not api_key:
        fail("an API key is needed: --api-key or RAYDAG_API_KEY", EXIT_BAD_INPUT)
    try:
        status, content = _exchange(
            method,
            f"{url.rstrip('/')}{path}",
            body,
            {**(headers or {}), "Authorization": f"Bearer {api_key}"},
        )
    except (OSError, HTTPException, ValueError) as exc:  # urllib's URLError is an OSError
        unserved = found_here and url == DEFAULT_URL  # no raydag serves this home, and none answers here
        fail(
            f"[red]cannot reach {escape(url)}:[/red] {escape(str(getattr(exc, 'reason', exc)))}"
            + (
                f" (no raydag serves {escape(str(_home()))}: raydag up starts one; or give --url)"
                if unserved
                else ""
            ),
            EXIT_RUN_FAILED,
        )
    try:
        answer = json.loads(content)
    except ValueError:
        answer = {"title": str(status), "detail": content[:500].decode("utf-8", errors="replace")}
    if status >= 400:
        refused = problem(
            answer if isinstance(answer, dict) else {"detail": str(answer)},
            status=status,
            retry=status in retryable,
        )
        fail(refused.text, refused.exit_code)
    return answer


def _exchange(method: str, url: str, body: Any, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """One request's status and content, over the standard library: httpx costs a command ~50 ms more to
    import, and a command makes a few requests at most (``raydag batch --url``, which makes many at once, keeps
    an httpx client). A proxy is used as the environment names one, as httpx would."""
    import urllib.error
    import urllib.parse
    import urllib.request

    data = None if body is None else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(
        urllib.parse.quote(url, safe=URL_SAFE),
        data=data,
        method=method,
        headers={**headers, **({"Content-Type": "application/json"} if data is not None else {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as refused:  # an answer, 4xx or 5xx: the caller reads it
        with refused:
            return int(refused.code), bytes(refused.read())


def _home() -> Path:
    from actors.launch.serving import home_in

    return home_in(os.environ)

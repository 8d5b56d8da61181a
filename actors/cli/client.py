"""The commands' client of a raydag's HTTP API: one request, its JSON answer, and a refusal or an unreachable
API printed in a person's words with the exit code it stands for. Over the standard library, printed without
rich: ``raydag run`` attached, ``continue`` and every command that speaks HTTP start with it (httpx would cost
them ~50 ms, rich another ~50: docs/BENCHMARKS.md).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from actors.cli.plain import escape, fail
from actors.cli.problems import problem
from actors.cli.report import EXIT_BAD_INPUT, EXIT_RUN_FAILED

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 60
URL_SAFE = ":/?#[]@!$&'()*+,;=%~"
"""What a URL keeps as it is; anything else (a space in a run id typed by hand) is percent-encoded, as httpx
does, so that the API answers it (404) rather than the request failing here."""


def api_request(
    method: str,
    url: str,
    path: str,
    api_key: str | None,
    body: Any = None,
    *,
    retryable: Collection[int] = (),
    headers: Mapping[str, str] | None = None,
) -> Any:
    """The API's JSON answer to one request; a refusal or an unreachable API is printed and exits: 2 for a
    refusal the request must change to avoid, 1 for a 5xx, an unreachable API, or a ``retryable`` status. A
    refusal is printed whole: its detail, then each field at fault and each member the API adds (``known``…)."""
    from http.client import HTTPException  # here: it imports ssl, which a command's start need not pay for

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
        fail(
            f"[red]cannot reach {escape(url)}:[/red] {escape(str(getattr(exc, 'reason', exc)))}",
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

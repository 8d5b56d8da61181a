"""``raydag run --url URL`` and ``raydag batch --url URL``: runs made by a raydag that is already up (``raydag
serve``, a deployment) over its HTTP API, starting nothing here: no Ray, no PostgreSQL, no tool server. A run
is the API's in every way (its key's tenant, subject and scopes, the server's toolsets and limits, its
refusals in the API's words); its report is printed as ``raydag run`` prints one it made itself.

Interrupted, the command stops following and the runs go on where they run (``raydag watch RUN`` follows one
again).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rich.markup import escape

from actors.cli.approvals import api_request
from actors.cli.inbox import waited_for
from actors.cli.report import console_for

if TYPE_CHECKING:
    from actors.cli.batch import CaseResult

errors = console_for(stderr=True)

FIRST_WAIT_S = 30
"""How long ``POST /runs?wait=`` holds the answer for the run to end or to wait for a person (within the
client's 60 s read timeout)."""
POLL_S = 0.25
"""How often a run still going after that is asked about again."""


def run_attached(
    url: str,
    api_key: str | None,
    body: Mapping[str, Any],
    *,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """The run ``body`` asks the API at ``url`` for, followed to its end, and its nodes: ``{"run", "nodes"}``,
    as ``read_report`` gives them. A refusal is printed and exits (``api_request``)."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    run: dict[str, Any] = api_request(
        "POST", url, f"/runs?wait={FIRST_WAIT_S}", api_key, dict(body), headers=headers
    )
    run_id = run["run_id"]
    shown: set[str] = set()
    try:
        while run["finished_at"] is None:
            for item in run.get("waiting_for") or ():
                what = waited_for(item)
                if what not in shown:
                    shown.add(what)
                    errors.print(
                        f"run {run_id} waits for {escape(what)}: `raydag inbox --run {run_id} --url {url}`",
                        soft_wrap=True,
                    )
            time.sleep(POLL_S)
            run = api_request("GET", url, f"/runs/{run_id}", api_key)
    except KeyboardInterrupt:
        errors.print(f"run {run_id} goes on at {escape(url)}: `raydag watch {run_id} --url {url}` follows it")
        raise
    nodes = api_request("GET", url, f"/runs/{run_id}/nodes", api_key)
    return {"run": run, "nodes": nodes}


def case_attached(client: Any, case_id: str, body: Mapping[str, Any]) -> CaseResult:
    """One case of ``raydag batch --url``, made by the API ``client`` speaks to (an ``httpx.Client`` holding
    the base URL and the key), followed to its end; in a worker thread of the batch. A refusal is the case's
    result (404: ``not_found``; another 4xx: ``rejected`` with the problem's type); an unreachable API or a 5xx
    raises, and the batch records an ``error``."""
    from actors.cli.batch import CaseResult
    from actors.launch.shutdown import stopping

    answer = client.post(f"/runs?wait={FIRST_WAIT_S}", json=dict(body))
    if 400 <= answer.status_code < 500:
        problem = _problem(answer)
        return CaseResult.refused_by_api(case_id, answer.status_code, problem)
    answer.raise_for_status()
    run: dict[str, Any] = answer.json()
    while run["finished_at"] is None:
        if stopping().is_set():  # the batch is stopping: this case's run goes on where it runs
            return CaseResult.interrupted(case_id, run["run_id"])
        time.sleep(POLL_S)
        polled = client.get(f"/runs/{run['run_id']}")
        polled.raise_for_status()
        run = polled.json()
    return CaseResult.of_run(case_id, run)


def _problem(answer: Any) -> dict[str, Any]:
    try:
        problem = answer.json()
    except ValueError:
        return {"detail": answer.text[:500]}
    return problem if isinstance(problem, dict) else {"detail": str(problem)}

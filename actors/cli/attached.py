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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors.cli.arguments import DEMO_TENANT, attached_resource_key, read_plan, resource_of
from actors.cli.client import api_request, serving_here
from actors.cli.plain import escape, fail, say
from actors.cli.report import EXIT_BAD_INPUT, stopped

if TYPE_CHECKING:
    from actors.cli.batch import CaseResult

FIRST_WAIT_S = 30
"""How long ``POST /runs?wait=`` holds the answer for the run to end or to wait for a person (within the
client's 60 s read timeout)."""
POLL_S = 0.25
"""How often a run still going after that is asked about again."""


def run_there(
    url: str,
    api_key: str | None,
    *,
    case_id: str | None,
    pairs: list[str],
    toolsets: Path | None,
    goal: str | None,
    key: str | None,
    planner: str | None,
    plan: Path | None,
    review: bool,
    stage: str,
    model: str | None = None,
) -> dict[str, Any]:
    """``raydag run`` attached: the run made by the raydag at ``url``, its resource read as a cold run reads it
    (a bare value: ``attached_resource_key``); interrupted, it says the run goes on there and exits 130/143."""
    resource_key = attached_resource_key(toolsets) if case_id is not None else None
    about = resource_of(case_id, pairs, key=resource_key, planned=plan is not None)
    body = {
        "resource": about or None,
        "goal": goal,
        "planner": planner,
        "plan": read_plan(plan) if plan is not None else None,
        "stage": stage,
        "review": "plan" if review else None,
        "model": model,
    }
    from actors.launch.shutdown import interrupted

    try:
        return run_attached(
            url,
            api_key,
            {name: value for name, value in body.items() if value is not None},
            idempotency_key=key,
        )
    except KeyboardInterrupt as stop:
        raise SystemExit(stopped(interrupted(stop))) from None


def continue_there(
    run_id: str,
    *,
    goal: str | None,
    answer: str | None,
    budgets: list[str],
    url: str | None,
    api_key: str | None,
) -> None:
    """``raydag continue``: the continuation of ``run_id`` made by the raydag at ``url`` (``None``: the one
    serving this home, as ``raydag run`` finds it, else the default URL), its id printed."""
    import json

    from actors.cli.client import DEFAULT_URL

    asked: dict[str, Any] = {}
    for item in budgets:
        name, _, value = item.partition("=")
        try:
            asked[name.strip()] = json.loads(value)
        except ValueError:
            fail(f"[red]--budget {escape(item)}:[/red] give NAME=NUMBER, e.g. deadline_s=600", EXIT_BAD_INPUT)
    body = {
        key: value
        for key, value in {"goal": goal, "answer": answer, "budgets": asked or None}.items()
        if value is not None
    }
    if url is None:  # the raydag serving this home, as raydag run finds it
        url, api_key = serving_here(None, DEMO_TENANT, api_key)
    continued = api_request("POST", url or DEFAULT_URL, f"/runs/{run_id}/continue", api_key, body)
    say(f"run {continued['run_id']} continues run {run_id} ({continued['status']})")


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
                what = waited_for(item, run_id)
                if what not in shown:
                    shown.add(what)
                    say(
                        f"run {run_id} waits for {escape(what)}: `raydag inbox --run {run_id} --url {url}`",
                        stderr=True,
                    )
            time.sleep(POLL_S)
            run = api_request("GET", url, f"/runs/{run_id}", api_key)
    except KeyboardInterrupt:
        say(
            f"run {run_id} goes on at {escape(url)}: `raydag watch {run_id} --url {url}` follows it",
            stderr=True,
        )
        raise
    nodes = api_request("GET", url, f"/runs/{run_id}/nodes", api_key)
    return {"run": run, "nodes": nodes}


def waited_for(item: Mapping[str, Any], run_id: str) -> str:
    """What a pending decision of ``run_id``'s is, in a few words: the operation and its tool, the round, the
    question; and the child run it is in, when not ``run_id`` itself (a sub-agent's)."""
    return _decision(item) + (f" in child run {item['run_id']}" if item["run_id"] != run_id else "")


def _decision(item: Mapping[str, Any]) -> str:
    if item["kind"] == "operation":
        return f"operation {item['operation_id']} ({item['tool']}, {item['state']})"
    if item["kind"] == "review":
        return f"plan review of round {item['round']}"
    if item["kind"] == "tool_question":
        return f"tool question {item['question_id']} ({item['tool']} asks {item['message']!r})"
    return f"question {item['number']}: {item['question']}"


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

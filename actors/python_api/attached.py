"""A script's session made through the raydag serving its home (``raydag up``, ``raydag serve``): its runs are
made over that raydag's HTTP API, as ``raydag run`` makes them, and nothing starts in the script (no Ray, no
PostgreSQL, no tool server). A run comes back as ``Run``, the shape an in-process session gives; a refusal is
``RunRefused`` with the outcome the supervisor gave the API. What an API key cannot do (deciding as another
person, the supervisor's own views) raises ``ServedElsewhere``, naming ``start(attach=False)``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any, TypeVar

import httpx

from actors.python_api.session import Raydag, Run, RunRefused
from actors.run.approvals import Decisions
from actors.run.submission import DEFAULT_GOAL, Submission
from dag.budget import BudgetRequest
from dag.contracts import INVESTIGATE, ToolContract
from dag.errors import RaydagError

_T = TypeVar("_T")

POLL_S = 0.05
"""How often ``wait`` (and so ``run``) asks about a run that has not ended (over loopback, a request costs ~2 ms)."""
TIMEOUT_S = 60.0

REFUSED_AS: dict[str, Submission] = {
    "plan-invalid": Submission.PLAN_INVALID,
    "resource-mismatch": Submission.RESOURCE_MISMATCH,
    "unknown-planner": Submission.UNKNOWN_PLANNER,
    "planner-unavailable": Submission.PLANNER_UNAVAILABLE,
    "model-not-allowed": Submission.MODEL_NOT_ALLOWED,
    "unknown-stage": Submission.UNKNOWN_STAGE,
    "planner-lacks-tools": Submission.PLANNER_LACKS_TOOLS,
    "budget-above-limit": Submission.BUDGET_ABOVE_LIMIT,
    "idempotency-key-reused": Submission.IDEMPOTENCY_CONFLICT,
    "resource-check-unavailable": Submission.RESOURCE_CHECK_UNAVAILABLE,
    "database-unavailable": Submission.UNAVAILABLE,
    "shutting-down": Submission.SHUTTING_DOWN,
    "run-not-found": Submission.RUN_NOT_FOUND,
    "run-not-finished": Submission.RUN_NOT_FINISHED,
    "run-not-continuable": Submission.RUN_NOT_CONTINUABLE,
    "history-pruned": Submission.HISTORY_PRUNED,
    "run-already-continued": Submission.ALREADY_CONTINUED,
}
"""The supervisor's outcome behind each problem type the API answers a submission with (``SubmitResult.refusal``,
read backwards); any other 404 is the toolset's resource check refusing the resource."""
PROBLEM_MEMBERS = frozenset({"type", "title", "status", "detail", "instance"})


class ServedElsewhere(RaydagError):
    """A session attached to the raydag at ``url`` cannot do this over its API, or the API did not answer it
    (``status``: the HTTP status, ``None`` when unreachable or not asked; ``problem``: its answer)."""

    def __init__(self, url: str, message: str, *, status: int | None = None, problem: Any = None) -> None:
        self.url = url
        self.status = status
        self.problem = problem
        super().__init__(message)


class AttachedRaydag(Raydag):
    """The session ``start()`` gives when a raydag serves this home with the same toolsets: each run is made by
    that raydag over its HTTP API, as the API key's tenant and subject (the key ``start`` was given, else the
    tenant's development key)."""

    def __init__(self, url: str, api_key: str, tenant: str) -> None:
        super().__init__(runtime=None, tenant=tenant, subject="")
        self.url = url
        self._client = httpx.Client(
            base_url=url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=TIMEOUT_S,
            trust_env=False,  # loopback: never through a proxy
        )

    def close(self) -> None:
        self._client.close()

    @property
    def subject(self) -> str:
        raise self._not_here("the runs are the API key's subject's; the key says whose")

    def tools(self) -> dict[str, ToolContract]:
        raise self._not_here("the tools offered are the supervisor's; its API does not list them")

    def toolsets(self) -> dict[str, Any]:
        """Each toolset server's state, as the raydag's ``/readyz`` shows it (answered 503 too, while one is
        unreachable), in the in-process shape: ``{"ready", "servers"}``."""
        readiness = self._ask("GET", "/readyz").json()
        servers: dict[str, Any] = readiness.get("toolsets", {}) if isinstance(readiness, dict) else {}
        return {"ready": all(server.get("ok") for server in servers.values()), "servers": servers}

    def submit(
        self,
        plan: Mapping[str, Any] | None = None,
        *,
        resource: Mapping[str, str] | None = None,
        goal: str | None = None,
        planner: str | None = None,
        budgets: BudgetRequest | None = None,
        idempotency_key: str | None = None,
        stage: str = INVESTIGATE,
        review: bool = False,
        model: str | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "resource": dict(resource) if resource else None,  # none: a plan whose tools bind nothing
            "goal": goal or DEFAULT_GOAL,
            "planner": planner,
            "plan": dict(plan) if plan is not None else None,
            "budgets": budgets.model_dump(exclude_none=True) if budgets is not None else None,
            "stage": stage,
            "review": "plan" if review else None,
            "model": model,
        }
        # A key of its own when none is given, as in-process: a request made again is one run still.
        headers = {"Idempotency-Key": idempotency_key or f"script:{uuid.uuid4()}"}
        answer = self._ask(
            "POST",
            "/runs",
            json={name: value for name, value in body.items() if value is not None},
            headers=headers,
        )
        return str(self._submitted(answer)["run_id"])

    def continue_run(
        self,
        run_id: str,
        *,
        goal: str | None = None,
        answer: str | None = None,
        budgets: BudgetRequest | None = None,
    ) -> str:
        body = {
            "goal": goal,
            "answer": answer,
            "budgets": budgets.model_dump(exclude_none=True) if budgets is not None else None,
        }
        asked = self._ask(
            "POST",
            f"/runs/{run_id}/continue",
            json={name: value for name, value in body.items() if value is not None},
        )
        return str(self._submitted(asked)["run_id"])

    def wait(self, run_id: str, timeout_s: float = 300.0) -> Run:
        deadline = time.monotonic() + timeout_s
        while True:
            run = self._read(f"/runs/{run_id}")
            if run["finished_at"] is not None:
                return self._with_nodes(run)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} has not ended within {timeout_s:g}s")
            time.sleep(POLL_S)

    def get(self, run_id: str) -> Run:
        return self._with_nodes(self._read(f"/runs/{run_id}"))

    def runs(
        self, *, status: Collection[str] = (), resource: Mapping[str, str] | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        pairs = [f"{key}:{value}" for key, value in (resource or {}).items()]
        page = self._read("/runs", params={"status": list(status), "resource": pairs, "limit": limit})
        items: list[dict[str, Any]] = page["items"]
        return items

    def inbox(self, *, by: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        if by is not None:
            raise self._not_here(f"the API decides who may act by the key, not as {by!r}")
        items: list[dict[str, Any]] = self._read("/decisions", params={"limit": limit})["items"]
        return items

    def operations(self, run_id: str) -> list[dict[str, Any]]:
        return self._listing(f"/runs/{run_id}/operations")

    def reviews(self, run_id: str) -> list[dict[str, Any]]:
        return self._listing(f"/runs/{run_id}/reviews")

    def questions(self, run_id: str) -> list[dict[str, Any]]:
        return self._listing(f"/runs/{run_id}/questions")

    def tool_questions(self, run_id: str) -> list[dict[str, Any]]:
        return self._listing(f"/runs/{run_id}/tool-questions")

    def _listing(self, path: str) -> list[dict[str, Any]]:
        """A run's listing; empty for a run the key may not read, as an in-process session answers."""
        answer = self._ask("GET", path)
        if answer.status_code == 404:
            return []
        listed: list[dict[str, Any]] = self._json(answer)
        return listed

    async def _at_desk(self, work: Callable[[Decisions], Awaitable[_T]]) -> _T:
        """Every decision (approve, reject, resolve, answer…) is made as a person ``by``: over the API, a
        decision is the API key's."""
        raise self._not_here(
            "a decision over its API is the API key's, not another person's (raydag approvals, reviews, "
            "questions)"
        )

    def _with_nodes(self, run: dict[str, Any]) -> Run:
        nodes = self._read(f"/runs/{run['run_id']}/nodes")
        return Run.of({"run": run, "nodes": nodes})

    def _read(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._json(self._ask("GET", path, params=params))

    def _ask(self, method: str, path: str, **request: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **request)
        except httpx.HTTPError as exc:
            raise ServedElsewhere(self.url, f"the raydag at {self.url} did not answer: {exc}") from exc

    def _json(self, answer: httpx.Response) -> Any:
        """The answer's JSON; a problem raises ``ServedElsewhere`` with it."""
        try:
            body = answer.json()
        except ValueError:
            body = {"detail": answer.text[:500]}
        if answer.status_code >= 400:
            detail = body.get("detail") if isinstance(body, dict) else body
            raise ServedElsewhere(
                self.url,
                f"the raydag at {self.url} answered {answer.status_code}: {detail}",
                status=answer.status_code,
                problem=body,
            )
        return body

    def _submitted(self, answer: httpx.Response) -> dict[str, Any]:
        """The run a submission made or replayed; a refusal of the supervisor's raises ``RunRefused``, as in
        the script's own process."""
        if answer.status_code in (404, 409, 410, 422, 503):
            problem = answer.json() if answer.headers.get("content-type", "").endswith("json") else {}
            slug = str(problem.get("type", "")).rsplit("/", 1)[-1]
            outcome = refused_as(answer.status_code, slug, problem)
            if outcome is not None:
                raise RunRefused(outcome, _error_of(outcome, slug, problem))
        run: dict[str, Any] = self._json(answer)
        return run

    def _not_here(self, why: str) -> ServedElsewhere:
        return ServedElsewhere(
            self.url,
            f"this session's runs are made by the raydag at {self.url}: {why}; "
            "raydag.start(attach=False) runs them in this process instead",
        )


def refused_as(status: int, slug: str, problem: Mapping[str, Any]) -> Submission | None:
    """The supervisor's outcome behind a refusal the API answered (``None``: not a refusal of a submission).
    A request that named no planner and gave no plan is answered ``unknown-planner`` without a planner."""
    outcome = REFUSED_AS.get(slug, Submission.RESOURCE_NOT_FOUND if status == 404 else None)
    if outcome is Submission.UNKNOWN_PLANNER and problem.get("planner") is None:
        return Submission.NO_PLANNER
    return outcome


def _error_of(outcome: Submission, slug: str, problem: Mapping[str, Any]) -> dict[str, Any]:
    """The supervisor's error behind a problem, as an in-process ``RunRefused`` carries it."""
    members = {name: value for name, value in problem.items() if name not in PROBLEM_MEMBERS}
    detail = problem.get("detail")
    match outcome:
        case Submission.PLAN_INVALID:
            return dict(members.get("plan_error") or {"message": detail})
        case Submission.RESOURCE_NOT_FOUND:
            return {"problem": slug, "detail": detail}
        case Submission.RESOURCE_MISMATCH | Submission.BUDGET_ABOVE_LIMIT:
            return {**members, "message": detail}
        case Submission.PLANNER_UNAVAILABLE:
            return {**members, "reason": detail}
        case _:
            return members

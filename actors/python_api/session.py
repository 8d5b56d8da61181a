"""raydag from a Python script or a Ray job entrypoint: the same supervisor, store, policy and budgets as the
API, driven in-process.

``start()`` brings up what a run needs beside the script's own Ray (or a local one, or the cluster
``RAY_ADDRESS`` names): the database (``RAYDAG_DATABASE_URL``, else the embedded one), its migrations, the
caseops tool server unless ``RAYDAG_MCP_URL`` names one, and a supervisor over the toolsets given. Everything
it started stops when the block ends; a Ray the script started itself is left running.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.api.views import read_report
from actors.launch.settings import Settings, load_settings
from actors.run.submission import DEFAULT_GOAL, RunRequest, Submission, SubmitResult
from actors.toolsets.config import Toolsets
from dag.budget import BudgetRequest
from dag.contracts import ToolContract
from dag.errors import RaydagError
from dag.policy import Principal


class RunRefused(RaydagError):
    """The supervisor started no run: ``outcome`` says why (an invalid plan, an unknown case, ...)."""

    def __init__(self, outcome: Submission, error: Mapping[str, Any] | None) -> None:
        self.outcome = outcome
        self.error = dict(error) if error else None
        refusal = SubmitResult(outcome, error=self.error).refusal()
        super().__init__(f"no run was started ({outcome.value}): {refusal.detail if refusal else self.error}")


@dataclass(frozen=True)
class Run:
    """A run as the API shows it (``GET /runs/{id}`` and its ``/nodes``)."""

    run_id: str
    status: str
    stop_reason: str | None
    detail: str | None
    result: Mapping[str, Any] | None
    plan: Mapping[str, Any] | None
    nodes: tuple[Mapping[str, Any], ...] = field(repr=False)

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> Run:
        run = report["run"]
        return cls(
            run_id=run["run_id"],
            status=run["status"],
            stop_reason=run["stop_reason"],
            detail=run["detail"],
            result=run["result"],
            plan=run["plan"],
            nodes=tuple(report["nodes"]),
        )

    def node(self, node_id: str) -> Mapping[str, Any]:
        """One node by id (``KeyError`` if the run has none of that id)."""
        for node in self.nodes:
            if node["node_id"] == node_id:
                return node
        raise KeyError(node_id)


class Raydag:
    """Runs plans and goals through one supervisor, as an operator of ``tenant`` holding every scope its
    toolsets declare. Obtain one from ``start()``."""

    def __init__(self, runtime: Any, tenant: str, subject: str) -> None:
        self._runtime = runtime
        self._tenant = tenant
        self._subject = subject

    def tools(self) -> dict[str, ToolContract]:
        """The tools offered now, by name (those of servers listed so far)."""
        import ray

        contracts: dict[str, ToolContract] = ray.get(self._runtime.supervisor.contracts.remote())
        return contracts

    def toolsets(self) -> dict[str, Any]:
        """Each toolset server's state, as ``/readyz`` shows it."""
        import ray

        status: dict[str, Any] = ray.get(self._runtime.supervisor.toolsets.remote())
        return status

    def _principal(self) -> Principal:
        """The caller: the session's tenant and subject, with every scope the toolsets served declare."""
        return Principal(self._tenant, self._subject, self._runtime.toolsets.scopes)

    def submit(
        self,
        plan: Mapping[str, Any] | None = None,
        *,
        resource: Mapping[str, str] | None = None,
        goal: str | None = None,
        planner: str | None = None,
        budgets: BudgetRequest | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Start a run over ``resource`` (``{"root": "/srv/reports"}``, ``{"case_id": "C-102"}``; what the
        tools' run-bound inputs are checked against) and return its id. With ``plan``, the run executes it
        (planner ``outputs`` unless another is named); without, ``planner`` (default: the toolsets' own,
        caseops' ``conformance``) proposes one for ``goal``."""
        import ray

        request = RunRequest(
            principal=self._principal(),
            resource=dict(resource or {}),
            goal=goal or DEFAULT_GOAL,
            planner=planner,
            plan=plan,
            budgets=budgets,
            idempotency_key=idempotency_key,
        )
        submitted = ray.get(self._runtime.supervisor.submit.remote(request))
        if submitted.outcome not in (Submission.CREATED, Submission.REPLAYED):
            raise RunRefused(submitted.outcome, submitted.error)
        assert submitted.run_id is not None
        return str(submitted.run_id)

    def wait(self, run_id: str, timeout_s: float = 300.0) -> Run:
        """The run once it has ended; ``TimeoutError`` if it has not within ``timeout_s``."""
        import ray

        deadline = time.monotonic() + timeout_s
        while not ray.get(self._runtime.supervisor.wait.remote(run_id, min(1.0, timeout_s))):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} has not ended within {timeout_s:g}s")
        return self.get(run_id)

    def get(self, run_id: str) -> Run:
        """The run as it is now, with its nodes."""
        report = asyncio.run(read_report(self._runtime.dsn, self._principal(), run_id, self.tools()))
        return Run.of(report)

    def run(
        self,
        plan: Mapping[str, Any] | None = None,
        *,
        resource: Mapping[str, str] | None = None,
        goal: str | None = None,
        planner: str | None = None,
        budgets: BudgetRequest | None = None,
        idempotency_key: str | None = None,
        timeout_s: float = 300.0,
    ) -> Run:
        """``submit``, then ``wait``: the run, ended, with its nodes and result."""
        run_id = self.submit(
            plan,
            resource=resource,
            goal=goal,
            planner=planner,
            budgets=budgets,
            idempotency_key=idempotency_key,
        )
        return self.wait(run_id, timeout_s)


@contextmanager
def start(
    toolsets: Toolsets | str | Path | None = None,
    *,
    tenant: str = "tenant-demo",
    settings: Settings | None = None,
) -> Iterator[Raydag]:
    """raydag for the block: ``toolsets`` (parsed, or a file's path; default ``RAYDAG_TOOLSETS``, else the
    caseops toolset) over the script's Ray, or a local one; settings from the environment unless given."""
    from actors.launch.local import local_runtime

    with local_runtime(settings or load_settings(), toolsets=toolsets) as runtime:
        yield Raydag(runtime, tenant, f"script:{os.environ.get('USER', 'operator')}")

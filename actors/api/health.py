"""Liveness and readiness: ``/healthz`` while the process serves, ``/readyz`` while PostgreSQL, every
supervisor and every toolset server answer. Neither needs an API key."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter

from actors.api._outcomes import DATABASE_RETRY_AFTER_S
from actors.api._problem import Problem, problem_responses
from actors.api.dependencies import Api
from actors.api.schemas import DependencyCheck, Liveness, Readiness
from actors.store.resilience import within

READY_TIMEOUT_S = 2.0
"""How long ``/readyz`` waits for each dependency before calling it unready."""
NO_KEY: dict[int | str, dict[str, Any]] = {200: {"description": "No API key needed."}}

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Liveness, responses=NO_KEY)
async def healthz() -> Liveness:
    """Liveness: the process answers. Says nothing about its dependencies (that is ``/readyz``)."""
    return Liveness(status="ok")


@router.get("/readyz", response_model=Readiness, responses={**NO_KEY, **problem_responses(503)})
async def readyz(api: Api) -> Readiness:
    """Readiness: PostgreSQL and every supervisor answer within ``READY_TIMEOUT_S``; 503 otherwise. The first
    supervisor is ``supervisor`` in ``checks``, any other ``supervisor:NAME``."""
    answers: dict[str, Any] = {}
    keys = ["supervisor", *(f"supervisor:{name}" for name in api.supervisors.names[1:])]

    def ping(key: str, handle: Any) -> Callable[[], Awaitable[None]]:
        async def answer() -> None:
            answers[key] = await handle.ping.remote()

        return answer

    database, *supervisors = await asyncio.gather(
        _check(api.store.ping),
        *(_check(ping(key, handle)) for key, (_, handle) in zip(keys, api.supervisors.all(), strict=True)),
    )
    checks = {"database": database, **dict(zip(keys, supervisors, strict=True))}
    toolsets: dict[str, Any] = answers.get("supervisor", {}).get("toolsets", {})
    servers: dict[str, Any] = toolsets.get("servers", {})
    failing = [name for name, check in checks.items() if not check.ok]
    unreachable = [name for name, server in servers.items() if not server["ok"]]
    if failing or unreachable:
        problems = [f"{', '.join(failing)} did not answer"] if failing else []
        problems += [f"toolset server {name!r} is {servers[name]['error']}" for name in unreachable]
        raise Problem(
            503,
            "not-ready",
            f"not ready: {'; '.join(problems)}",
            checks={name: check.model_dump() for name, check in checks.items()},
            toolsets=servers,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    return Readiness(status="ready", checks=checks, toolsets=servers)


async def _check(answer: Callable[[], Awaitable[Any]]) -> DependencyCheck:
    """Whether a dependency answered in time, how fast, and why not (the exception's type: no details)."""
    started = time.perf_counter()
    try:
        await within(answer, READY_TIMEOUT_S)
    except TimeoutError:
        return DependencyCheck(ok=False, reason=f"no answer within {READY_TIMEOUT_S:g} s")
    except Exception as exc:
        return DependencyCheck(ok=False, reason=type(exc).__name__)
    return DependencyCheck(ok=True, ms=round((time.perf_counter() - started) * 1000, 1))

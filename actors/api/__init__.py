"""The run API over HTTP. ``app``: ``create_app`` composes the settings (as the routes' state), the middleware,
the problem handlers and the routers; ``RunAPI`` and the Serve deployments.

A module-level router per noun, each route's dependencies read from ``app.state`` (``dependencies``):

- ``runs``: a run created, listed (``GET /runs``), read with its nodes and events, cancelled, continued;
- ``decisions``: ``GET /decisions``, what waits for people across the tenant's runs, and a waiting run's
  ``waiting_for``;
- ``operations``, ``reviews``, ``questions``, ``tool_questions``: each kind of a person's decision, listed and
  decided through ``actors.run.approvals.Decisions``;
- ``health``: ``/healthz``, ``/readyz``; ``viewer``: the run viewer's page, ``/edges`` and ``/stream``.

Beside them: ``dependencies`` (``ApiState``, the caller, the run it may read), ``pages`` (cursors, the listings'
filters), ``schemas`` (every answer's shape), ``views`` (those shapes from the rows, for the CLI and the Python
API too), ``supervisors`` (the deployment's supervisors as a replica sees them), and the plumbing re-exported
here: problems and how OpenAPI declares them, the request guard and deadline, and what the supervisor's
answers mean over HTTP."""

from actors.api._body import nests_deeper_than
from actors.api._middleware import SECURITY_HEADERS, RequestDeadline, RequestGuard
from actors.api._outcomes import (
    DATABASE_RETRY_AFTER_S,
    SUPERVISOR_RETRY_AFTER_S,
    ask,
    database_unavailable,
    install_problem_handlers,
    raise_for_submission,
    submissions,
    supervisor_unavailable,
)
from actors.api._problem import (
    PROBLEM_BASE,
    PROBLEM_JSON,
    Problem,
    ProblemDocument,
    problem_responses,
    with_problem_schema,
)

__all__ = [
    "DATABASE_RETRY_AFTER_S",
    "PROBLEM_BASE",
    "PROBLEM_JSON",
    "SECURITY_HEADERS",
    "SUPERVISOR_RETRY_AFTER_S",
    "Problem",
    "ProblemDocument",
    "RequestDeadline",
    "RequestGuard",
    "ask",
    "database_unavailable",
    "install_problem_handlers",
    "nests_deeper_than",
    "problem_responses",
    "raise_for_submission",
    "submissions",
    "supervisor_unavailable",
    "with_problem_schema",
]

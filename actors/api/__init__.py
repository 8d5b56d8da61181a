"""The run API's HTTP plumbing: problems and how OpenAPI declares them, the request guard and deadline, and
what the supervisor's answers mean over HTTP. ``actors.api.app`` assembles the routes from these."""

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

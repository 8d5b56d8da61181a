"""The caseops resource check: a run over a case needs the case to be the tenant's.

Named by import path in the caseops toolset file (``resource_check: {callable: ...}``); the runtime calls
it before it creates a run, with its own connection pool, where the caseops tables live beside its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dag.policy import Principal
from dag.run_resource import RESOURCE_ALLOWED, ResourceAnswer

CASE_NOT_FOUND = ResourceAnswer(
    allowed=False, problem="case-not-found", detail="no case with this id was found"
)
"""One answer for an unknown case and another tenant's: byte for byte the same."""


async def case_of_tenant(
    *, principal: Principal, resource: Mapping[str, str], database: Any
) -> ResourceAnswer:
    """Allowed if the resource's case is one of the principal's tenant's cases."""
    case_id = resource.get("case_id")
    if case_id is None:
        return RESOURCE_ALLOWED  # not a run over a case: no caseops tool will be used in it
    found = await database.fetchval(
        "SELECT 1 FROM cases WHERE tenant_id = $1 AND case_id = $2 LIMIT 1", principal.tenant_id, case_id
    )
    return RESOURCE_ALLOWED if found else CASE_NOT_FOUND

"""The evidence a run cites, as MCP resources: ``case://``, ``policy://`` and ``evidence://`` templates.

A read needs a token whose ``tool`` claim is ``resources/read`` (``tokens.RESOURCE_READER``) and the scope of
the URI's scheme; the HTTP guard checks both. Here the same tenant and case rules as the tools apply: a
token reads only its own case, the policies that case is under and that case's source documents, and
anything else — another case, another tenant's data, an unknown version — is the same "not found".
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp_types import Resource
from pydantic import BaseModel

from dag.tokens import RESOURCE_READER, TaskClaims
from mcp_server.auth import case_of, current_claims
from mcp_server.caseops import CaseopsError
from mcp_server.contracts import SCOPE_CASES, SCOPE_DOCUMENTS, SCOPE_POLICIES
from mcp_server.evidence import (
    CASE_TEMPLATE,
    DOCUMENT_TEMPLATE,
    JSON,
    POLICY_TEMPLATE,
    case_uri,
    policy_uri,
)
from mcp_server.tools import Backend


def _not_found(uri: str) -> ResourceNotFoundError:
    # One answer for "no such resource" and "not yours": existence must not leak across tenants or cases.
    return ResourceNotFoundError(f"resource {uri} was not found")


def _reader(uri: str, case_id: str) -> TaskClaims:
    claims = current_claims.get()
    if claims is None or claims.tool != RESOURCE_READER or case_of(claims) != case_id:
        raise _not_found(uri)
    return claims


def _json(model: BaseModel) -> str:
    return model.model_dump_json()


def register_evidence(server: MCPServer, backend: Backend) -> None:
    """Add the three evidence templates to ``server``."""

    @server.resource(
        CASE_TEMPLATE,
        name="case",
        title="Case snapshot",
        description="One recorded version of a claim case (needs scope cases:read).",
        mime_type=JSON,
    )
    async def read_case(case_id: str, version: str) -> str:
        uri = f"case://{case_id}@{version}"
        claims = _reader(uri, case_id)
        snapshot = None
        if version.isdigit():
            snapshot = await backend.repository().case_at_version(claims.tenant_id, case_id, int(version))
        if snapshot is None:
            raise _not_found(uri)
        return _json(snapshot)

    @server.resource(
        POLICY_TEMPLATE,
        name="policy",
        title="Policy requirements",
        description="The documents a policy version requires; readable for a case under it (policies:read).",
        mime_type=JSON,
    )
    async def read_policy(policy_id: str, version: str) -> str:
        uri = policy_uri(policy_id, version)
        claims = current_claims.get()
        case_id = case_of(claims) if claims is not None and claims.tool == RESOURCE_READER else None
        if claims is None or case_id is None:
            raise _not_found(uri)
        policy = await backend.repository().policy_of_case(claims.tenant_id, case_id, policy_id, version)
        if policy is None:
            raise _not_found(uri)
        return _json(policy)

    @server.resource(
        DOCUMENT_TEMPLATE,
        name="source-document",
        title="Source document",
        description="A source document of a case: label, canonical code, capture time (documents:read).",
        mime_type=JSON,
    )
    async def read_document(case_id: str, document_id: str, version: str) -> str:
        uri = f"evidence://{case_id}/{document_id}@{version}"
        claims = _reader(uri, case_id)
        document = await backend.repository().source_document(claims.tenant_id, case_id, uri)
        if document is None:
            raise _not_found(uri)
        return _json(document)


async def case_resources(backend: Backend, claims: TaskClaims) -> list[Resource]:
    """The resources the token's case cites, limited to the token's scopes: what ``resources/list`` shows."""
    repository = backend.repository()
    found: list[Resource] = []
    case_id = case_of(claims)
    if case_id is None:  # a token for a run over another kind of resource cites no case
        return found
    try:
        snapshot = await repository.case_snapshot(claims.tenant_id, case_id)
    except CaseopsError:  # an unknown case lists nothing; the tools answer CASE_NOT_FOUND for it
        return found
    if SCOPE_CASES in claims.scopes:
        uri = case_uri(snapshot.case_id, snapshot.version)
        found.append(Resource(uri=uri, name=f"case {snapshot.case_id}", mime_type=JSON))
    if SCOPE_POLICIES in claims.scopes:
        uri = policy_uri(snapshot.policy_id, snapshot.policy_version)
        found.append(Resource(uri=uri, name=f"policy {snapshot.policy_id}", mime_type=JSON))
    if SCOPE_DOCUMENTS in claims.scopes:
        for document in await repository.source_documents(claims.tenant_id, case_id):
            found.append(
                Resource(uri=document.source_ref, name=f"document {document.document_id}", mime_type=JSON)
            )
    return found

"""The caseops tools as MCP tools: built from the contracts, every call checked against its task token.

A refusal is a tool execution error (``isError``) whose ``structuredContent`` is
``{"error": {"code", "message"}}`` with a stable code, the same JSON as its text content.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import asyncpg
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, ValidationError

from dag.contracts import Risk, ToolContract
from dag.fingerprint import canonical_json
from dag.tokens import TaskClaims
from mcp_server.auth import case_of, current_claims
from mcp_server.caseops import CaseopsError, CaseopsRepository, case_not_found
from mcp_server.config import ToolServerConfig
from mcp_server.contracts import (
    DRAFT_DOCUMENT_REQUEST,
    EXPORT_EVIDENCE,
    FIND_DOCUMENT_REQUEST,
    GET_CASE_SNAPSHOT,
    GET_POLICY_REQUIREMENTS,
    LIST_UNCLASSIFIED_DOCUMENTS,
    RESOLVE_DOCUMENT_ALIAS,
    SEND_DOCUMENT_REQUEST,
)
from mcp_server.export import export_evidence
from mcp_server.upstream import DATABASE, UPSTREAM_ERRORS

log = logging.getLogger(__name__)


class ToolErrorCode(StrEnum):
    """The codes of refusals the server itself decides; business codes (``CASE_NOT_FOUND``, ...) come from
    the repository."""

    UNAUTHENTICATED = "UNAUTHENTICATED"
    TOKEN_NOT_FOR_TOOL = "TOKEN_NOT_FOR_TOOL"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    UPSTREAM_UNAVAILABLE = "UPSTREAM_UNAVAILABLE"


@dataclass
class Backend:
    """What tools need at call time; the pool exists only while the server's lifespan runs."""

    config: ToolServerConfig
    pool: asyncpg.Pool | None = None
    calls: Counter[str] = field(default_factory=Counter)
    executions: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """Calls that reached their handler, by (tenant, case, tool)."""
    answered: Counter[str] = field(default_factory=Counter)
    """Calls the handler answered (a result, not a refusal), by task without its attempt: ``run/node``."""

    def live_pool(self) -> asyncpg.Pool:
        if self.pool is None:
            raise RuntimeError("the tool server is not started")
        return self.pool

    def repository(self) -> CaseopsRepository:
        return CaseopsRepository(self.live_pool())


def error_result(code: str, message: str, **detail: str) -> CallToolResult:
    payload = {"error": {"code": code, "message": message, **detail}}
    return CallToolResult(
        content=[TextContent(type="text", text=canonical_json(payload))],
        structured_content=payload,
        is_error=True,
    )


def _annotations(contract: ToolContract) -> ToolAnnotations:
    """Hints for clients, derived from the contract; raydag never trusts annotations for authorization. Every
    caseops tool is idempotent: a read, or a write that acts once per idempotency key it is given."""
    return ToolAnnotations(
        title=contract.description,
        read_only_hint=contract.risk is Risk.READ_ONLY,
        destructive_hint=contract.risk is Risk.IRREVERSIBLE_WRITE,
        idempotent_hint=True,
        open_world_hint=False,
    )


ToolHandler = Callable[[TaskClaims, Any], Awaitable[BaseModel]]
"""Serves one call: the verified claims and the validated input model in, the output model out."""

ToolBinding = tuple[ToolContract, ToolHandler]


def caseops_bindings(backend: Backend) -> list[ToolBinding]:
    """The caseops tools: four checks, the writes of a document request, and the evidence export (a long read
    that runs as an MCP task); every query is scoped to the token's tenant."""
    repository = backend.repository
    return [
        (GET_CASE_SNAPSHOT, lambda claims, args: repository().case_snapshot(claims.tenant_id, args.case_id)),
        (
            GET_POLICY_REQUIREMENTS,
            lambda claims, args: repository().policy_requirements(claims.tenant_id, args.case_id),
        ),
        (
            LIST_UNCLASSIFIED_DOCUMENTS,
            lambda claims, args: repository().unclassified_documents(claims.tenant_id, args.case_id),
        ),
        (
            RESOLVE_DOCUMENT_ALIAS,
            lambda claims, args: repository().resolve_document_alias(
                claims.tenant_id, args.case_id, args.document_id
            ),
        ),
        (
            DRAFT_DOCUMENT_REQUEST,
            lambda claims, args: repository().draft_document_request(
                claims.tenant_id, args.case_id, list(args.missing_document_codes), args.idempotency_key
            ),
        ),
        (SEND_DOCUMENT_REQUEST, lambda claims, args: _send(backend, claims, args)),
        (
            FIND_DOCUMENT_REQUEST,
            lambda claims, args: repository().find_document_request(
                claims.tenant_id, args.case_id, args.idempotency_key
            ),
        ),
        (
            EXPORT_EVIDENCE,
            lambda claims, args: export_evidence(
                backend.live_pool(),
                claims.tenant_id,
                args.case_id,
                backend.config.export_stage_ms,
                confirm=args.confirm,
            ),
        ),
    ]


async def _send(backend: Backend, claims: TaskClaims, args: Any) -> BaseModel:
    """Send, then — for the first calls a test names in ``stall_after_commit`` — hold the answer back past any
    caller's patience: the request is sent, and the caller cannot know it (what a timeout looks like)."""
    sent = await backend.repository().send_document_request(
        claims.tenant_id, args.case_id, args.draft_id, args.idempotency_key
    )
    name = SEND_DOCUMENT_REQUEST.name
    if backend.calls[name] <= backend.config.stall_after_commit.get(name, 0):
        await asyncio.sleep(3600)
    return sent


class _RawArguments(ArgModelBase):
    """Hands the tool the arguments as sent: the contract's input model validates them in the tool, so a
    rejection is an ``isError`` result with the code ``INVALID_ARGUMENTS`` rather than free text."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _invalid(contract: ToolContract, exc: ValidationError) -> CaseopsError:
    # Locations and reasons only: the rejected values are the caller's data and stay out of the answer.
    problems = "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or '(arguments)'}: {error['msg']}"
        for error in exc.errors()[:10]
    )
    return CaseopsError(ToolErrorCode.INVALID_ARGUMENTS, f"invalid arguments for {contract.name}: {problems}")


def guarded_tool(contract: ToolContract, handler: ToolHandler, backend: Backend) -> Tool:
    """A tool whose input schema, input validation and output schema all come from the contract, and whose
    every call passes the token's tool and case binding first (the HTTP guard has checked its scope).

    The contract's input model forbids unknown fields, so the published ``inputSchema`` carries
    ``additionalProperties: false`` and the server rejects what the schema does not allow.
    """
    name = contract.name

    async def call(arguments: dict[str, Any]) -> BaseModel | CallToolResult:
        backend.calls[name] += 1
        claims = current_claims.get()
        config = backend.config
        if config.latency_ms:
            await asyncio.sleep(config.latency_ms / 1000)
        try:
            if claims is None:
                raise CaseopsError(ToolErrorCode.UNAUTHENTICATED, "this server runs without task tokens")
            if name != claims.tool:
                raise CaseopsError(
                    ToolErrorCode.TOKEN_NOT_FOR_TOOL,
                    f"the task token was minted for another tool than {name}",
                )
            try:
                args = contract.input_model.model_validate(arguments)
            except ValidationError as exc:
                raise _invalid(contract, exc) from None
            case_id = getattr(args, "case_id", None)
            if "case_id" in contract.run_bound and case_id != case_of(claims):
                raise case_not_found(str(case_id))  # a token is bound to one case; others do not exist for it
            if backend.calls[name] <= config.faults.get(name, 0):
                raise CaseopsError(
                    ToolErrorCode.UPSTREAM_UNAVAILABLE, "the upstream system is unavailable; retry later"
                )
            backend.executions[(claims.tenant_id, str(case_id), name)] += 1
            answer = await handler(claims, args)
        except CaseopsError as error:
            return error_result(error.code, error.message)
        except UPSTREAM_ERRORS as exc:
            log.warning("%s could not read the database (%s)", name, type(exc).__name__)
            return error_result(
                ToolErrorCode.UPSTREAM_UNAVAILABLE,
                "the case database could not be reached; retry later",
                upstream=DATABASE,
            )
        backend.answered[claims.task_id.rsplit("/", 1)[0]] += 1
        return answer

    return Tool(
        fn=call,
        name=name,
        description=contract.description,
        parameters=contract.input_model.model_json_schema(),
        fn_metadata=FuncMetadata(arg_model=_RawArguments, output_model=contract.output_model),
        is_async=True,
        annotations=_annotations(contract),
    )

"""RFC 9457 problems: the one shape errors leave the API in, and how the OpenAPI document declares them."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://raydag.dev/problems/"


class Problem(Exception):
    """An RFC 9457 problem: the only shape errors leave this API in."""

    def __init__(
        self, status: int, slug: str, detail: str, *, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def response(self, instance: str) -> JSONResponse:
        body = {
            "type": PROBLEM_BASE + self.slug,
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            **self.extra,
        }
        return ProblemResponse(body, status_code=self.status, headers=self.headers)


class ProblemResponse(JSONResponse):
    """Problem JSON in ASCII: a location or detail that quotes a lone surrogate from the request still
    encodes (as ``\\ud800``), where UTF-8 output would fail and turn a 4xx into a 500."""

    media_type = PROBLEM_JSON

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


class FieldError(BaseModel):
    location: str = Field(description="A JSON pointer into the request: /body/..., /query/..., /header/...")
    message: str


class ProblemDocument(BaseModel):
    """The schema of every error answer (``application/problem+json``); some carry more members."""

    model_config = ConfigDict(extra="allow", title="Problem")

    type: str = Field(description=f"{PROBLEM_BASE}<slug>")
    title: str
    status: int
    detail: str
    instance: str
    errors: list[FieldError] | None = Field(default=None, description="invalid-request: each field at fault")


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each status an ``application/problem+json`` body of ``ProblemDocument``."""
    return {
        status: {
            "description": HTTPStatus(status).phrase,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def with_problem_schema(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI ``document`` with ``ProblemDocument`` (as ``Problem``) among its component schemas."""
    schema = ProblemDocument.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(schema.pop("$defs", {}))
    schemas["Problem"] = schema
    return document

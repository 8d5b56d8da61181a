"""The OpenAPI document describes every answer: each route's success names the shape it answers with (a
generated client can use it), the routes are module-level routers named for their nouns, and the listings
take the filters docs/API.md names."""

from __future__ import annotations

from functools import cache
from typing import Any

from fastapi import APIRouter

from actors.launch.settings import shipped_toolsets
from dag.budget import Budgets

STREAMS = {("get", "/runs/{run_id}/stream")}
"""Routes that answer with something other than JSON."""


@cache
def document() -> dict[str, Any]:
    from actors.api.app import ApiConfig, create_app
    from actors.supervisor import SupervisorConfig

    supervisor = SupervisorConfig(
        dsn="postgresql://unused",
        mcp_url="http://127.0.0.1:9/mcp",
        token_key=b"k" * 32,
        limits=Budgets(),
        toolsets=shipped_toolsets("http://127.0.0.1:9/mcp"),
    )
    config = ApiConfig(supervisor=supervisor, api_keys={}, supervisor_name="unused")
    openapi: dict[str, Any] = create_app(config, tools_mounted=False).openapi()
    return openapi


def named(schema: dict[str, Any]) -> bool:
    """Whether ``schema`` is a named shape, or an array of one: not an object of anything."""
    if "$ref" in schema:
        return True
    return schema.get("type") == "array" and "$ref" in schema.get("items", {})


def test_every_success_names_the_shape_it_answers_with() -> None:
    unnamed = []
    for path, methods in document()["paths"].items():
        for method, operation in methods.items():
            if (method, path) in STREAMS:
                continue
            for status, answer in operation["responses"].items():
                if status.startswith("2"):
                    schema = answer.get("content", {}).get("application/json", {}).get("schema", {})
                    if not named(schema):
                        unnamed.append(f"{method.upper()} {path} {status}")
    assert unnamed == []


def test_a_waiting_run_and_the_inbox_name_the_four_kinds_of_decision() -> None:
    schemas = document()["components"]["schemas"]
    kinds = [
        schemas[ref.rsplit("/", 1)[-1]]["properties"]["kind"]["const"]
        for ref in schemas["DecisionsPage"]["properties"]["items"]["items"]["discriminator"][
            "mapping"
        ].values()
    ]

    assert sorted(kinds) == ["operation", "question", "review", "tool_question"]
    assert (
        schemas["RunView"]["properties"]["waiting_for"]["items"]
        == schemas["DecisionsPage"]["properties"]["items"]["items"]
    )


def test_the_listings_take_their_filters() -> None:
    paths = document()["paths"]

    def parameters(path: str) -> set[str]:
        return {parameter["name"] for parameter in paths[path]["get"]["parameters"]}

    assert parameters("/runs") == {
        "status",
        "resource",
        "case_id",
        "created_after",
        "created_before",
        "limit",
        "cursor",
    }
    assert parameters("/decisions") == {"kind", "run_id", "resource", "case_id", "limit", "cursor"}


def test_the_routes_are_module_level_routers_named_for_their_nouns() -> None:
    from actors.api import app

    assert all(isinstance(router, APIRouter) for router in app.ROUTERS)
    modules = [router.routes[0].endpoint.__module__ for router in app.ROUTERS]  # type: ignore[attr-defined]
    assert modules == [
        "actors.api.health",
        "actors.api.runs",
        "actors.api.decisions",
        "actors.api.operations",
        "actors.api.reviews",
        "actors.api.questions",
        "actors.api.tool_questions",
        "actors.api.viewer._routes",
    ]

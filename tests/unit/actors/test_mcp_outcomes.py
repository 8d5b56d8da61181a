"""How the MCP SDK's own refusals of a result become outcomes: its output-schema check is a protocol error."""

from __future__ import annotations

import pytest

from actors.calls.mcp.outcomes import classify_exception
from dag.events import ErrorKind


@pytest.mark.parametrize(
    "wording",
    [
        "Invalid structured content returned by tool get-sum: 'x' is not of type 'number'",
        "Tool get-sum has an output schema but did not return structured content",
    ],
)
def test_the_sdks_output_schema_refusal_is_an_output_schema_mismatch(wording: str) -> None:
    error = classify_exception(RuntimeError(wording))

    assert (error.kind, error.code) == (ErrorKind.PROTOCOL, "OUTPUT_SCHEMA_MISMATCH")
    assert "'x'" not in error.message  # the SDK's text may echo the output: it is not recorded


def test_any_other_runtime_error_is_an_unknown_effect_recorded_by_type_only() -> None:
    error = classify_exception(RuntimeError("secret-looking detail"))

    assert (error.kind, error.code, error.message) == (
        ErrorKind.UNKNOWN_EFFECT,
        "UNEXPECTED_ERROR",
        "RuntimeError",
    )

"""What the official MCP conformance suite cannot check on this server, and why: the baseline the conformance
test holds every run of the suite to.

The suite's scenarios are written against its reference "everything server" (diagnostic tools, prompts,
``test://`` resources, logging). This server serves four read-only caseops tools and evidence resources,
statelessly, with JSON answers: whatever needs more is listed here with the reason, check by check, and
counted as what the suite reports (FAILURE, WARNING, SKIPPED, INFO), never as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass

SPEC_VERSIONS = ("2026-07-28", "2025-11-25")
SCENARIOS = {
    "2026-07-28": (
        "server-stateless",
        "completion-complete",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "tools-call-with-progress",
        "json-schema-2020-12",
        "server-sse-multiple-streams",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "sep-2164-resource-not-found",
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
        "dns-rebinding-protection",
        "caching",
        "http-header-validation",
        "http-custom-header-server-validation",
        *(
            f"input-required-result-{name}"
            for name in (
                "basic-elicitation",
                "basic-sampling",
                "basic-list-roots",
                "request-state",
                "multiple-input-requests",
                "multi-round",
                "missing-input-response",
                "non-tool-request",
                "result-type",
                "unsupported-methods",
                "tampered-state",
                "capability-check",
                "ignore-extra-params",
                "validate-input",
            )
        ),
    ),
    "2025-11-25": (
        "server-initialize",
        "server-session-lifecycle",
        "logging-set-level",
        "ping",
        "completion-complete",
        "tools-list",
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-audio",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-with-logging",
        "tools-call-error",
        "tools-call-with-progress",
        "tools-call-sampling",
        "tools-call-elicitation",
        "json-schema-2020-12",
        "elicitation-sep1034-defaults",
        "server-sse-polling",
        "server-sse-multiple-streams",
        "elicitation-sep1330-enums",
        "resources-list",
        "resources-read-text",
        "resources-read-binary",
        "resources-templates-read",
        "resources-subscribe",
        "resources-unsubscribe",
        "prompts-list",
        "prompts-get-simple",
        "prompts-get-with-args",
        "prompts-get-embedded-resource",
        "prompts-get-with-image",
        "dns-rebinding-protection",
    ),
}
"""Every server scenario of the suite for each spec version (``conformance list --server``; extensions, which
are in neither version, aside). All of them run; a test below keeps this list equal to the suite's."""


@dataclass(frozen=True)
class Expected:
    """A check that does not succeed here, what the suite says of it, and why it cannot succeed."""

    status: str
    """FAILURE, WARNING, SKIPPED or INFO: each counted as what it is, none as a pass."""
    says: str
    """A fragment of the check's message: the same check failing for another reason is not expected."""
    because: str


def fixture(name: str, status: str = "FAILURE") -> Expected:
    return Expected(
        status,
        name,
        f"calls {name}, a fixture of the suite's reference 'everything server'; this server serves only "
        "the four caseops tools and the evidence resources",
    )


NOT_FOUND = "Method not found"
NO_PROMPTS = "the server has no prompts (the SDK answers an unknown one with -32603 in the 2026 era)"
NO_INPUT = "no caseops tool asks the client for input: there is no InputRequiredResult to continue"
NO_SUBSCRIPTIONS = "subscriptions are off: nothing on this server changes at run time (README)"
JSON_ANSWERS = "the server answers every request with one JSON body (json_response), never an SSE stream"
NO_SESSION = "the server is stateless and issues no MCP-Session-Id"
NO_X_MCP_HEADER = "no caseops tool declares x-mcp-header parameters, so there is nothing to validate"

_BOTH: dict[tuple[str, str], Expected] = {
    ("completion-complete", "completion-complete"): Expected(
        "FAILURE", NOT_FOUND, "the server offers no completions"
    ),
    ("json-schema-2020-12", "json-schema-2020-12-tool-found"): fixture("json_schema_2020_12_tool"),
    ("resources-read-text", "resources-read-text"): fixture("test://static-text"),
    ("resources-read-binary", "resources-read-binary"): fixture("test://static-binary"),
    ("resources-templates-read", "resources-templates-read"): fixture("test://template/123/data"),
    **{
        (f"tools-call-{name}", f"tools-call-{name}"): fixture(tool)
        for name, tool in (
            ("simple-text", "test_simple_text"),
            ("image", "test_image_content"),
            ("audio", "test_audio_content"),
            ("embedded-resource", "test_embedded_resource"),
            ("mixed-content", "test_multiple_content_types"),
            ("error", "test_error_handling"),
            ("with-progress", "test_tool_with_progress"),
        )
    },
}
_PROMPTS = ("simple", "with-args", "embedded-resource", "with-image")
_LISTEN_CHECKS = ("sends-subscription-ack", "tags-subscription-id", "honors-notification-filter")
EXPECTED: dict[str, dict[tuple[str, str], Expected]] = {
    "2026-07-28": {
        **_BOTH,
        **{
            (f"prompts-get-{name}", f"prompts-get-{name}"): Expected(
                "FAILURE", "Internal server error", NO_PROMPTS
            )
            for name in _PROMPTS
        },
        ("server-stateless", "sep-2575-server-rejects-undeclared-capability"): fixture(
            "test_missing_capability"
        ),
        ("server-stateless", "sep-2575-missing-capability-http-400"): fixture("test_missing_capability"),
        ("server-stateless", "sep-2575-http-server-no-independent-requests-on-stream"): fixture(
            "test_streaming_elicitation"
        ),
        ("server-stateless", "sep-2575-server-no-log-without-loglevel"): fixture("test_logging_tool"),
        **{
            ("server-stateless", f"sep-2575-server-{check}"): Expected(
                "SKIPPED", "no subscription-delivered capability", NO_SUBSCRIPTIONS
            )
            for check in _LISTEN_CHECKS
        },
        **{
            ("server-stateless", f"sep-2575-server-sends-{kind}-list-changed-on-subscription"): Expected(
                "SKIPPED", f"did not declare {kind}.listChanged", f"the {kind} list never changes at run time"
            )
            for kind in ("prompts", "tools")
        },
        ("caching", "sep-2549-resources-read-caching-hints"): Expected(
            "SKIPPED",
            "resources/list failed or returned no resources",
            "the suite sends no token, and without one resources/list is empty: there is nothing to read",
        ),
        ("server-sse-multiple-streams", "server-sse-streams-functional"): Expected(
            "INFO", "SSE streaming is optional", JSON_ANSWERS
        ),
        **{
            ("http-custom-header-server-validation", f"sep-2243-server-{check}"): Expected(
                "FAILURE", "no tool with x-mcp-header annotations", NO_X_MCP_HEADER
            )
            for check in (
                "no-xmcp-tool",
                "decode-base64",
                "validate-param-match",
                "reject-invalid-param-chars",
                "reject-param-mismatch",
            )
        },
        **{
            (f"input-required-result-{scenario}", f"sep-2322-{check}"): fixture(
                f"test_input_required_result_{tool}"
            )
            for scenario, check, tool in (
                ("basic-elicitation", "elicitation-incomplete", "elicitation"),
                ("basic-sampling", "sampling-incomplete", "sampling"),
                ("basic-list-roots", "list-roots-incomplete", "list_roots"),
                ("request-state", "request-state-incomplete", "request_state"),
                ("multiple-input-requests", "multiple-inputs-incomplete", "multiple_inputs"),
                ("result-type", "result-type-included", "elicitation"),
                ("capability-check", "respect-client-capabilities", "capabilities"),
            )
        },
        ("input-required-result-ignore-extra-params", "sep-2322-ignore-unexpected-params"): fixture(
            "test_input_required_result_elicitation", status="WARNING"
        ),
        ("input-required-result-multi-round", "sep-2322-multi-round-r1"): Expected(
            "FAILURE", "Expected InputRequiredResult", NO_INPUT
        ),
        ("input-required-result-missing-input-response", "sep-2322-missing-response-rerequests"): Expected(
            "WARNING", "instead of re-requesting", NO_INPUT
        ),
        ("input-required-result-tampered-state", "sep-2322-reject-tampered-state"): Expected(
            "FAILURE", "could not get initial InputRequiredResult", NO_INPUT
        ),
        ("input-required-result-non-tool-request", "sep-2322-non-tool-incomplete"): Expected(
            "FAILURE", "Internal server error", f"it asks prompts/get for an input: {NO_PROMPTS}"
        ),
    },
    "2025-11-25": {
        **_BOTH,
        **{
            (f"prompts-get-{name}", f"prompts-get-{name}"): Expected("FAILURE", "Unknown prompt", NO_PROMPTS)
            for name in _PROMPTS
        },
        ("tools-call-sampling", "tools-call-sampling"): fixture("test_sampling"),
        ("tools-call-elicitation", "tools-call-elicitation"): fixture("test_elicitation"),
        ("tools-call-with-logging", "tools-call-with-logging"): Expected(
            "FAILURE", NOT_FOUND, "it sets a log level first, and the server offers no logging"
        ),
        ("logging-set-level", "logging-set-level"): Expected(
            "FAILURE", NOT_FOUND, "the server offers no logging"
        ),
        ("elicitation-sep1034-defaults", "elicitation-sep1034-general"): fixture(
            "test_elicitation_sep1034_defaults"
        ),
        ("elicitation-sep1330-enums", "elicitation-sep1330-general"): fixture(
            "test_elicitation_sep1330_enums"
        ),
        ("resources-subscribe", "resources-subscribe"): Expected("FAILURE", NOT_FOUND, NO_SUBSCRIPTIONS),
        ("resources-unsubscribe", "resources-unsubscribe"): Expected("FAILURE", NOT_FOUND, NO_SUBSCRIPTIONS),
        ("server-initialize", "server-session-id-visible-ascii"): Expected(
            "INFO", "did not provide an MCP-Session-Id", NO_SESSION
        ),
        ("server-session-lifecycle", "server-session-lifecycle-skipped"): Expected(
            "INFO", "session lifecycle does not apply", NO_SESSION
        ),
        ("server-sse-multiple-streams", "server-sse-multiple-streams-session"): Expected(
            "WARNING", "did not provide session ID", NO_SESSION
        ),
        ("server-sse-polling", "server-sse-polling-session"): Expected(
            "WARNING", "did not provide session ID", NO_SESSION
        ),
        ("server-sse-polling", "outgoing-request"): Expected(
            "INFO", "tools/call", "a record of the request sent"
        ),
        ("server-sse-polling", "incoming-response"): Expected(
            "INFO", "200", "a record of the answer received"
        ),
        ("server-sse-polling", "server-sse-content-type"): Expected(
            "INFO", "Server returned JSON instead of SSE", JSON_ANSWERS
        ),
    },
}
"""Every check that does not succeed, by spec version and (scenario, check id). Any other check must be a
SUCCESS, and every entry here must still be reported as written: a change either way fails a test."""

"""OpenTelemetry for raydag: one trace per run, across the API, the supervisor, Ray tasks and the MCP server.

Export follows the standard ``OTEL_*`` variables: with ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, spans go out over OTLP/HTTP in batches; without it nothing is
exported (``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none`` switch it off explicitly). Each process
configures itself once. W3C trace context travels as a small ``{"traceparent": ...}`` carrier: in the run
request, in each tool call, and in each MCP request's headers.

Spans carry identifiers (run, node, tool, fingerprint, attempt, stop reason), never argument values or tokens.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

if TYPE_CHECKING:
    import requests

_configured = False
_lock = threading.Lock()


def _exporter() -> SpanExporter | None:
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    chosen = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if chosen == "none" or not endpoint:
        return None
    if chosen != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={chosen!r}: raydag exports traces with 'otlp' or 'none'")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if any(os.environ.get(name) for name in _CREDENTIAL_PROVIDERS):
        return OTLPSpanExporter()  # the session is the operator's credential provider's
    return OTLPSpanExporter(session=_settled_session(endpoint))  # reads the rest of OTEL_EXPORTER_OTLP_*


_CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


def _settled_session(endpoint: str) -> requests.Session:
    """An HTTP session for the exporter that read the environment once, here, in the configuring thread.

    A Ray worker sets and removes ``OMP_NUM_THREADS`` around every task it runs, while requests reads the
    proxy variables off ``os.environ`` on each export, from the batch processor's own thread: a variable
    removed while it iterates fails the export (``KeyError: 'OMP_NUM_THREADS'``) and the batch is lost. The
    proxies the environment names for the collector (``HTTPS_PROXY``, ``NO_PROXY``) are read now instead; the
    collector's certificate is ``OTEL_EXPORTER_OTLP_CERTIFICATE``'s, as before.
    """
    import requests
    from requests.utils import get_environ_proxies

    session = requests.Session()
    session.trust_env = False
    session.proxies.update(get_environ_proxies(endpoint))
    return session


def configure_tracing(service: str) -> None:
    """Install this process's tracer provider once, named ``OTEL_SERVICE_NAME`` or ``service``."""
    global _configured
    with _lock:
        if _configured:
            return
        _configured = True
        exporter = _exporter()
        if exporter is None:
            return  # the API's default no-op tracer: spans cost next to nothing and go nowhere
        provider = TracerProvider(
            resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)})
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)


def flush() -> None:
    """Export what is buffered now (a worker about to go idle, a test about to look)."""
    provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is not None:
        force_flush()


@cache
def tracer() -> trace.Tracer:
    """raydag's tracer, got once per process: ``trace.get_tracer`` reads the environment on every call, and
    before ``configure_tracing`` installs a provider it answers a proxy that follows the provider installed
    later."""
    return trace.get_tracer("raydag")


def carrier(span: trace.Span | None = None) -> dict[str, str]:
    """The W3C trace context of ``span`` (or of the current context), to send along."""
    ctx = trace.set_span_in_context(span) if span is not None else None
    headers: dict[str, str] = {}
    propagate.inject(headers, context=ctx)
    return headers


def context_of(headers: Mapping[str, str] | None) -> otel_context.Context:
    """The context a received carrier (or HTTP headers) names; empty when there is none."""
    return propagate.extract(dict(headers or {}))

"""Span export: what raydag's exporter reads from the environment, and when."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator, Mapping
from typing import ClassVar

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors.observe import tracing


class _Collector(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        _Collector.received.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Collector.received = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _ChangingEnviron(Mapping[str, str]):
    """``os.environ`` as a Ray worker's looks from another thread while a task starts or ends: a variable
    listed a moment ago is gone when it is read (Ray sets and removes ``OMP_NUM_THREADS`` around each task)."""

    def __init__(self, real: Mapping[str, str]) -> None:
        self._real = dict(real)

    def __getitem__(self, key: str) -> str:
        if key == "OMP_NUM_THREADS":
            raise KeyError(key)
        return self._real[key]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._real, "OMP_NUM_THREADS"])

    def __len__(self) -> int:
        return len(self._real) + 1

    def copy(self) -> dict[str, str]:
        return dict(self._real)


def _spans() -> list[object]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("test").start_span("tool call caseops_get_case_snapshot").end()
    return list(memory.get_finished_spans())


def _exporter(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> SpanExporter:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    exporter = tracing._exporter()
    assert exporter is not None
    return exporter


def test_spans_are_exported_while_a_ray_task_changes_the_environment_from_another_thread(
    monkeypatch: pytest.MonkeyPatch, collector: str
) -> None:
    exporter = _exporter(monkeypatch, collector)
    spans = _spans()

    with monkeypatch.context() as changing:
        changing.setattr(os, "environ", _ChangingEnviron(os.environ))
        result = exporter.export(spans)  # type: ignore[arg-type]

    assert result is SpanExportResult.SUCCESS
    assert len(_Collector.received) == 1
    assert b"tool call caseops_get_case_snapshot" in _Collector.received[0]


def test_the_exporter_goes_through_the_proxy_the_environment_names_for_the_collector_and_only_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert tracing._settled_session("http://collector.example:4318").proxies == {
        "http": "http://proxy.internal:3128"
    }

    monkeypatch.setenv("NO_PROXY", "collector.example")
    assert tracing._settled_session("http://collector.example:4318").proxies == {}

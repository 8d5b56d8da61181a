"""One trace per run, across processes: the API request, the run, its round, its nodes and checkpoints in the
supervisor actor, each tool call in a Ray worker, and the MCP server's handling of it.

The test process (API and MCP server) records into the SDK's in-memory exporter; the supervisor and its Ray
workers export over OTLP/HTTP, configured by the standard OTEL_* variables in their runtime environment, to a
receiver in the test.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from actors.calls.call import ExecutorKind
from actors.launch.background_server import BackgroundServer
from actors.launch.settings import shipped_toolsets
from actors.run.submission import RunRequest, Submission
from actors.store.runs import RunStore
from actors.supervisor import NAMESPACE, RunSupervisor
from dag.budget import Budgets
from dag.policy import Principal
from dag.states import RunStatus
from mcp_server.contracts import ALL_SCOPES
from mcp_server.server import MCP_PATH
from tests.c102 import C102_RESULT
from tests.integration.conftest import DEMO_KEY, TEST_API_KEYS, RunningToolServer, auth
from tests.loopback import wait_until_ok

PRINCIPAL_ALL = Principal("tenant-demo", "test", frozenset(ALL_SCOPES))


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    attributes: dict[str, Any]


class OtlpReceiver:
    """POST /v1/traces, protobuf, as an OpenTelemetry collector receives it."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self._http = BackgroundServer()
        self.url = self._http.url

    def start(self) -> OtlpReceiver:
        self._http.start(Starlette(routes=[Route("/v1/traces", self._receive, methods=["POST"])]))
        return self

    def stop(self) -> None:
        self._http.stop()

    async def _receive(self, request: Request) -> Response:
        message = trace_service_pb2.ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        for resource_spans in message.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"),
                "",
            )
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Span(
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            service,
                            {a.key: _value(a.value) for a in span.attributes},
                        )
                    )
        return Response(status_code=200, media_type="application/x-protobuf")


def ancestors_in(by_id: dict[str, Span], span: Span) -> list[Span]:
    """The spans above ``span`` among ``by_id``, its parent first."""
    chain = []
    while span.parent_id in by_id:
        span = by_id[span.parent_id]
        chain.append(span)
    return chain


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


@pytest.fixture(scope="module")
def in_memory() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process; the rest of the session records into memory
    return exporter


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver().start()
    yield otlp
    otlp.stop()


def settled(base: str, view: dict[str, Any], within_s: float = 240) -> dict[str, Any]:
    """The run's view once it has ended: on a loaded machine a run may outlast the request's own wait."""
    deadline = time.monotonic() + within_s
    while view["status"] in ("pending", "running", "waiting"):
        assert time.monotonic() < deadline, view
        time.sleep(0.5)
        view = httpx.get(f"{base}/runs/{view['run_id']}", headers=auth(DEMO_KEY), timeout=30).json()
    return view


def local_spans(exporter: InMemorySpanExporter) -> list[Span]:
    return [
        Span(
            span.name,
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
            f"{span.parent.span_id:016x}" if span.parent else "",
            "test-process",
            dict(span.attributes or {}),
        )
        for span in exporter.get_finished_spans()
    ]


@pytest.mark.parametrize("executor", list(ExecutorKind))
def test_a_c102_run_is_one_trace_from_the_request_to_the_mcp_server(
    ray_cluster: None,
    dsn: str,
    token_key: bytes,
    in_memory: InMemorySpanExporter,
    receiver: OtlpReceiver,
    executor: ExecutorKind,
) -> None:
    import ray

    from actors.api.app import ApiConfig, create_app
    from actors.supervisor import SupervisorConfig

    api = BackgroundServer()
    name = f"raydag-traced-{uuid.uuid4().hex[:8]}"
    config = ApiConfig(
        supervisor=SupervisorConfig(
            dsn=dsn,
            mcp_url=api.url + MCP_PATH,
            token_key=token_key,
            limits=Budgets(),
            tool_executor=executor,
            toolsets=shipped_toolsets(api.url + MCP_PATH),
        ),
        api_keys=TEST_API_KEYS,
        supervisor_name=name,
    )
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "raydag-under-test",
    }
    supervisor = (
        ray.remote(RunSupervisor)
        .options(
            name=name, namespace=NAMESPACE, num_cpus=0, max_concurrency=100, runtime_env={"env_vars": otel}
        )
        .remote(config.supervisor)
    )
    api.start(create_app(config))
    # Ready once the supervisor has listed the app's own /mcp (which was not up when the supervisor started).
    wait_until_ok(api.url + "/readyz", within_s=60)
    client_span = trace.get_tracer("test").start_span("test client")
    traceparent = (
        f"00-{client_span.get_span_context().trace_id:032x}-{client_span.get_span_context().span_id:016x}-01"
    )
    try:
        response = httpx.post(
            api.url + "/runs",
            params={"wait": 60},
            json={"case_id": "C-102"},
            headers={**auth(DEMO_KEY), "traceparent": traceparent},
            timeout=90,
        )
        assert response.status_code == 201, response.text
        run_view = settled(api.url, response.json())
    finally:
        client_span.end()
        api.stop()
    assert run_view["result"] == C102_RESULT, run_view
    trace_id = f"{client_span.get_span_context().trace_id:032x}"

    deadline = time.monotonic() + 30
    while True:  # the actor and its workers export in batches
        remote = [span for span in receiver.spans if span.trace_id == trace_id]
        names = {span.name for span in remote}
        if {"run", "round 1", "tool call caseops_resolve_document_alias"} <= names and any(
            span.name == "run" and "raydag.status" in span.attributes for span in remote
        ):
            break
        assert time.monotonic() < deadline, f"spans so far: {sorted(names)}"
        time.sleep(0.1)
    ray.kill(supervisor)

    spans = [span for span in local_spans(in_memory) + remote if span.trace_id == trace_id]
    by_id = {span.span_id: span for span in spans}

    def parent(span: Span) -> Span:
        return by_id[span.parent_id]

    def ancestors(span: Span) -> list[Span]:
        return ancestors_in(by_id, span)

    def only(name: str) -> Span:
        found = [span for span in spans if span.name == name]
        assert len(found) == 1, (name, [span.name for span in spans])
        return found[0]

    request = only("POST /runs")  # FastAPI's own server span of the request
    assert request.parent_id == f"{client_span.get_span_context().span_id:016x}"
    run = only("run")
    assert request in ancestors(run)
    assert run.attributes["raydag.status"] == "completed"
    round_one = only("round 1")
    assert parent(round_one) is run
    for node_id, tool in [
        ("case", "caseops_get_case_snapshot"),
        ("policy", "caseops_get_policy_requirements"),
        ("docs", "caseops_list_unclassified_documents"),
        ("resolve[0]", "caseops_resolve_document_alias"),
    ]:
        # One span per attempt: on a loaded machine a call may time out and be tried again.
        attempts = sorted(
            (span for span in spans if span.name == f"node {node_id}"),
            key=lambda span: int(span.attributes["raydag.attempt"]),
        )
        assert [span.attributes["raydag.attempt"] for span in attempts] == list(range(1, len(attempts) + 1))
        node = attempts[-1]  # the attempt that succeeded
        assert all(parent(span) is round_one for span in attempts)
        assert node.attributes["raydag.tool"] == tool
        assert len(node.attributes["raydag.fingerprint"]) == 64
        call = next(
            span for span in spans if span.name == f"tool call {tool}" and span.parent_id == node.span_id
        )
        # The SDK's own client span ("MCP send …") sits between the call and the server's handling of it.
        served = next(
            span for span in spans if span.name == f"mcp tools/call {tool}" and call in ancestors(span)
        )
        assert served.attributes["raydag.tool"] == tool
    checkpoints = [span for span in spans if span.name == "checkpoint"]
    assert len(checkpoints) >= 5
    assert all(parent(span) in (run, round_one) for span in checkpoints)
    assert {span.service for span in remote} == {"raydag-under-test"}
    for span in spans:  # identifiers only: no argument values, no tokens
        for value in span.attributes.values():
            assert "C-102" not in str(value)
            assert "Bearer" not in str(value)


async def test_each_child_runs_spans_sit_under_its_parents_agent_node_span_in_one_trace(
    ray_cluster: None,
    dsn: str,
    token_key: bytes,
    tool_server: RunningToolServer,
    store: RunStore,
    receiver: OtlpReceiver,
) -> None:
    import ray

    from actors.supervisor import SupervisorConfig

    name = f"raydag-traced-agents-{uuid.uuid4().hex[:8]}"
    otel = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_SERVICE_NAME": "raydag-under-test",
    }
    config = SupervisorConfig(
        dsn=dsn,
        mcp_url=tool_server.url,
        token_key=token_key,
        limits=Budgets(),
        toolsets=shipped_toolsets(tool_server.url),
    )
    supervisor = (
        ray.remote(RunSupervisor)
        .options(
            name=name, namespace=NAMESPACE, num_cpus=0, max_concurrency=100, runtime_env={"env_vars": otel}
        )
        .remote(config)
    )
    trace_id = uuid.uuid4().hex
    caller_span = uuid.uuid4().hex[:16]
    case = {"id": "case", "tool": "caseops_get_case_snapshot", "args": {"case_id": "C-102"}}
    inner = {"id": "inner", "agent": {"goal": "read the case", "plan": {"nodes": [case]}}}
    outer = {"id": "outer", "agent": {"goal": "delegate", "plan": {"nodes": [inner]}}}
    try:
        submitted = await supervisor.submit.remote(
            RunRequest(
                principal=PRINCIPAL_ALL,
                resource={"case_id": "C-102"},
                plan={"nodes": [outer]},
                trace={"traceparent": f"00-{trace_id}-{caller_span}-01"},
            )
        )
        assert submitted.outcome is Submission.CREATED, submitted
        root = str(submitted.run_id)
        deadline = time.monotonic() + 120  # a bound against hanging, not a timing claim
        while (status := await store.run_status(root)) is None or not RunStatus(status).terminal:
            assert time.monotonic() < deadline, status
            await asyncio.sleep(0.1)
        assert status == "completed"
        (middle,) = [str(child) for child in (await store.run_row(PRINCIPAL_ALL, root) or {})["children"]]
        (leaf,) = [str(child) for child in (await store.run_row(PRINCIPAL_ALL, middle) or {})["children"]]

        def run_span(run_id: str) -> Span | None:
            return next(
                (
                    span
                    for span in receiver.spans
                    if span.name == "run"
                    and span.attributes.get("raydag.run_id") == run_id
                    and "raydag.status" in span.attributes
                ),
                None,
            )

        deadline = time.monotonic() + 30
        while not all(run_span(run) for run in (root, middle, leaf)) or not any(
            span.name == "tool call caseops_get_case_snapshot" for span in receiver.spans
        ):  # the actor and its workers export in batches
            assert time.monotonic() < deadline, sorted({span.name for span in receiver.spans})
            await asyncio.sleep(0.1)
    finally:
        ray.kill(supervisor)

    spans = [span for span in receiver.spans if span.trace_id == trace_id]
    by_id = {span.span_id: span for span in spans}

    def ancestors(span: Span) -> list[Span]:
        return ancestors_in(by_id, span)

    def agent_node(run_id: str, node_id: str) -> Span:
        (found,) = [
            span
            for span in spans
            if span.name == f"node {node_id}" and span.attributes.get("raydag.run_id") == run_id
        ]
        return found

    runs: dict[str, Span] = {}
    for run_id in (root, middle, leaf):
        found = run_span(run_id)
        assert found is not None, run_id
        runs[run_id] = found
    assert {span.trace_id for span in runs.values()} == {trace_id}
    assert runs[root].parent_id == caller_span
    outer_node = agent_node(root, "outer")
    inner_node = agent_node(middle, "inner")
    assert outer_node.attributes["raydag.child_run_id"] == middle
    assert inner_node.attributes["raydag.child_run_id"] == leaf
    # Each child run's span is a child of its parent's agent node span, which sits under the parent's run.
    assert runs[middle].parent_id == outer_node.span_id
    assert runs[root] in ancestors(outer_node)
    assert runs[leaf].parent_id == inner_node.span_id
    assert runs[middle] in ancestors(inner_node)
    call = next(span for span in spans if span.name == "tool call caseops_get_case_snapshot")
    assert [span.name for span in ancestors(call)][:2] == ["node case", "round 1"]
    assert runs[leaf] in ancestors(call)
    assert runs[root] in ancestors(call)  # the grandchild's call is in the one trace, under the root run

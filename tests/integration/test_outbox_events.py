"""The outbox tells the world when a run starts waiting for people and when a person decides, beside its end:
each event at least once, each run's in the order written, received here over a real webhook."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from actors.launch.background_server import BackgroundServer
from actors.store.database import create_pool
from actors.store.outbox import OutboxRelay
from tests.integration.conftest import APPROVER_KEY
from tests.integration.test_api_supervisor_restart import serve_api  # noqa: F401 - a fixture
from tests.integration.test_operations import decide, finished, own_api, sent, wait_for, waiting_send


class Receiver:
    """A webhook that keeps every event it is sent, in arrival order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._server = BackgroundServer()

    async def _hook(self, request: Request) -> Response:
        event = await request.json()
        assert request.headers["idempotency-key"] == event["event_id"]
        self.events.append(event)
        return Response(status_code=204)

    def __enter__(self) -> Receiver:
        self._server.start(Starlette(routes=[Route("/hook", self._hook, methods=["POST"])]))
        return self

    def __exit__(self, *_: object) -> None:
        self._server.stop()

    @property
    def url(self) -> str:
        return self._server.url + "/hook"

    def of(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events as received, once each (the outbox delivers at least once)."""
        seen: dict[str, dict[str, Any]] = {}
        for event in self.events:
            if event["run_id"] == run_id:
                seen.setdefault(event["event_id"], event)
        return list(seen.values())


def test_a_person_approved_write_tells_the_world_it_waits_who_decided_and_how_it_ended(
    ray_cluster: None,
    dsn: str,
    scratch_dsn: str,
    start_tool_server: Any,
    token_key: bytes,
    serve_api: Any,  # noqa: F811 - the fixture imported above
) -> None:
    with Receiver() as receiver:
        base, _, _ = own_api(
            start_tool_server, scratch_dsn, token_key, serve_api, outbox_webhook_url=receiver.url
        )
        with httpx.Client(base_url=base, timeout=30) as client:
            run_id, send = waiting_send(client)
            assert decide(client, run_id, send, "approve", APPROVER_KEY).status_code == 200
            wait_for(client, run_id, finished)
        deadline = time.monotonic() + 30
        while not any(event["type"] == "run.finished" for event in receiver.of(run_id)):
            assert time.monotonic() < deadline, receiver.of(run_id)
            time.sleep(0.2)
        told = receiver.of(run_id)

    assert [event["type"] for event in told] == ["run.waiting", "decision.decided", "run.finished"], told
    waiting, decided, ended = told
    assert waiting["waits"] == [{"kind": "operation", "operation_id": send["operation_id"]}]
    assert decided["decision"]["operation_id"] == send["operation_id"]
    assert decided["decision"]["args_hash"] == send["args_hash"]
    assert (decided["state"], decided["decided_by"]) == ("approved", "person:tenant-demo/approver")
    assert ended["status"] == "completed"
    assert sent(dsn, send) == 1


async def test_a_runs_undelivered_event_holds_its_later_ones_back_but_no_other_runs(scratch_dsn: str) -> None:
    """Two runs with two events each; the sink refuses run A's first event once: run B's both go out, A's
    second only after its first, on the next pass."""
    runs = [uuid.uuid4(), uuid.uuid4()]
    pool = await create_pool(scratch_dsn, max_size=2)
    try:
        for run_id in runs:
            await pool.execute(
                """INSERT INTO runs (run_id, tenant_id, subject, case_id, goal, planner, status, request_hash,
                                     last_seq, created_at, updated_at, resource)
                   VALUES ($1, 't', 's', NULL, 'g', 'p', 'waiting', 'h', 1, now(), now(), '{}')""",
                run_id,
            )
            for topic in ("first", "second"):
                event_id = uuid.uuid4()
                await pool.execute(
                    "INSERT INTO outbox (event_id, run_id, topic, payload, created_at) VALUES ($1, $2, $3, $4, now())",
                    event_id,
                    run_id,
                    topic,
                    {"event_id": str(event_id), "run_id": str(run_id), "type": topic},
                )
        delivered: list[tuple[str, str]] = []
        refused = {str(runs[0])}

        class Sink:
            async def deliver(self, event: Any) -> None:
                if event["run_id"] in refused and event["type"] == "first":
                    refused.clear()
                    raise ConnectionError("the receiver is down")
                delivered.append((event["run_id"], event["type"]))

        relay = OutboxRelay(pool, Sink())
        first_pass = await relay.relay_once()
        after_first = list(delivered)
        second_pass = await relay.relay_once()
    finally:
        await pool.close()

    a, b = (str(run_id) for run_id in runs)
    assert first_pass == 2
    assert after_first == [(b, "first"), (b, "second")]  # A's second did not overtake A's first
    assert second_pass == 2
    assert delivered[2:] == [(a, "first"), (a, "second")]


async def test_a_decision_no_run_drives_is_told_too(scratch_dsn: str) -> None:
    """The trigger tells of a decision whoever writes it: here, a bare SQL update of a question's row."""
    run_id = uuid.uuid4()
    pool = await create_pool(scratch_dsn, max_size=2)
    try:
        await pool.execute(
            """INSERT INTO runs (run_id, tenant_id, subject, case_id, goal, planner, status, request_hash,
                                 last_seq, created_at, updated_at, resource)
               VALUES ($1, 't', 's', NULL, 'g', 'p', 'waiting', 'h', 1, now(), now(), '{}')""",
            run_id,
        )
        await pool.execute(
            """INSERT INTO questions (run_id, number, round, tenant_id, subject, text, state, expires_at)
               VALUES ($1, 1, 1, 't', 's', 'which?', 'awaiting', now() + interval '1 day')""",
            run_id,
        )
        await pool.execute(
            """UPDATE questions SET state = 'answered', answer = 'C-102', answered_by = 'person:t/alice',
                                    answered_at = now() WHERE run_id = $1""",
            run_id,
        )
        told = await pool.fetch("SELECT topic, payload FROM outbox WHERE run_id = $1", run_id)
    finally:
        await pool.close()

    [(topic, payload)] = [(row["topic"], row["payload"]) for row in told]
    assert topic == "decision.decided"
    assert payload["decision"] == {"kind": "question", "number": 1}
    assert (payload["state"], payload["decided_by"]) == ("answered", "person:t/alice")

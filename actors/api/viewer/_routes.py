"""The viewer's routes: the static page, the DAG's edges, and the live event stream."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import HTMLResponse, StreamingResponse

from actors.api._problem import problem_responses
from actors.api.dependencies import Api, Caller, RunHistory
from actors.api.viewer._graph import Edge, run_edges
from actors.api.viewer._stream import StreamLimits, run_event_stream
from actors.api.views import load_state
from actors.store.runs import MAX_SEQ

LastEventId = Annotated[int | None, Header(alias="Last-Event-ID", ge=0, le=MAX_SEQ)]
EventCursor = Annotated[int, Query(ge=0, le=MAX_SEQ)]
EVENT_STREAM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The run's events as server-sent events, live.",
        # Each message: ``id`` (the event's seq), ``event`` (its kind), ``data`` (the event as /events shows it).
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "event": {"type": "string"},
                        "data": {"type": "string"},
                    },
                    "required": ["id", "event", "data"],
                }
            }
        },
    },
    **problem_responses(401, 404, 410, 422, 503),
}


PAGE_SCRIPTS = ("decide.js",)
"""Scripts of the page kept in files of their own; each is inlined where ``view.html`` names it."""


@dataclass(frozen=True)
class ViewerPage:
    """``view.html`` and the headers it is served with. Its CSP admits only its own inline scripts and
    style (by hash) and requests to this origin: nothing can be loaded from anywhere else, and markup that
    tool outputs might smuggle into the page cannot run. Nothing may frame it (``frame-ancestors``,
    ``X-Frame-Options``): a page that decides must not be clicked through another site's."""

    html: str
    headers: dict[str, str]

    @classmethod
    def load(cls) -> ViewerPage:
        files = resources.files("actors.api.viewer")
        html = files.joinpath("view.html").read_text(encoding="utf-8")
        for name in PAGE_SCRIPTS:
            tag = f'<script src="{name}"></script>'
            assert html.count(tag) == 1, f"view.html names {name} once"
            html = html.replace(tag, f"<script>{files.joinpath(name).read_text(encoding='utf-8')}</script>")
        policy = "; ".join(
            [
                "default-src 'none'",
                f"script-src {_hashes(html, 'script')}",
                f"style-src {_hashes(html, 'style')}",
                "connect-src 'self'",
                "img-src data:",
                "base-uri 'none'",
                "form-action 'none'",
                "frame-ancestors 'none'",
            ]
        )
        return cls(
            html=html,
            headers={
                "Content-Security-Policy": policy,
                "X-Frame-Options": "DENY",
                "Cross-Origin-Opener-Policy": "same-origin",
                "Referrer-Policy": "no-referrer",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "no-cache",
            },
        )


def _hashes(html: str, tag: str) -> str:
    bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.DOTALL)
    assert bodies, f"view.html has no inline <{tag}>"
    digests = (base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() for body in bodies)
    return " ".join(f"'sha256-{digest}'" for digest in digests)


@functools.cache
def _page() -> ViewerPage:
    return ViewerPage.load()


STREAM_LIMITS = StreamLimits()

router = APIRouter(tags=["viewer"])


@router.get("/runs/{run_id}/view", response_class=HTMLResponse, include_in_schema=False)
async def view_run(run_id: str) -> HTMLResponse:
    """The run viewer: static, for anyone. It holds no run data; its script reads the API key from the URL
    fragment (never sent here) and fetches the run with it."""
    page = _page()
    return HTMLResponse(page.html, headers=page.headers)


@router.get(
    "/runs/{run_id}/edges", response_model=list[Edge], responses=problem_responses(401, 404, 410, 503)
)
async def get_edges(run: RunHistory, api: Api) -> list[Edge]:
    """The run's DAG edges: each plan node's references, and each ``for_each`` group's children."""
    return run_edges(await load_state(api.store, str(run["run_id"])))


@router.get("/runs/{run_id}/stream", response_class=StreamingResponse, responses=EVENT_STREAM_RESPONSES)
async def stream_events(
    run: RunHistory,
    principal: Caller,
    api: Api,
    after: EventCursor = 0,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """The run's events after ``Last-Event-ID`` (or ``after``) as ``text/event-stream``, live."""
    start = last_event_id if last_event_id is not None else after
    events = run_event_stream(lambda: api.store, principal, str(run["run_id"]), start, STREAM_LIMITS)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )

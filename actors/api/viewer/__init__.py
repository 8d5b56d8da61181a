"""The run viewer: ``GET /runs/{id}/view`` (one static HTML page, no build step, nothing loaded from
elsewhere), and the routes its script reads besides the API's own: ``/edges`` and the live ``/stream``."""

from actors.api.viewer._graph import Edge, run_edges
from actors.api.viewer._routes import ViewerPage, router
from actors.api.viewer._stream import StreamLimits, sse_message

__all__ = ["Edge", "StreamLimits", "ViewerPage", "router", "run_edges", "sse_message"]

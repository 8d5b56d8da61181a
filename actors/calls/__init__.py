"""How a node's call leaves the supervisor and comes back as an outcome.

- ``call``: ``ToolCall``, ``ToolOutcome``, the ``ToolExecutor`` interface and ``ExecutorKind`` (plain data);
- ``exchange``: how calls travel to ``ToolCaller`` actors in batches (``pack``/``unpack``), how many at once;
- ``executors``: the three executors (a Ray task per call, a pool of callers, the supervisor's own loop) and
  ``build_executor``;
- ``caller``: the ``ToolCaller`` actor, which makes many calls at once from one event loop;
- ``task``: the Ray task that makes one call;
- ``placement``: where callers and supervisors go over a cluster's nodes (``spread``);
- ``live_catalogue``: ``LiveCatalogue``, the toolsets as their servers list them now: listed in the
  background, re-listed, their tools withdrawn when a server cannot be reached or changes a pinned tool;
- ``mcp/``: the MCP client itself (connections, listings, stdio servers, classification).

Other packages use ``call``'s names, ``build_executor`` and ``LiveCatalogue``; the rest is this package's own.
"""

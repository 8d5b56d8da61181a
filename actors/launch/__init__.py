"""Bringing raydag up and down, and what it is configured with.

- ``settings``: ``Settings``, read once from ``RAYDAG_*`` variables; everything configurable is here;
- ``local``: the runtime on one machine (embedded PostgreSQL, the hosted tool server, local Ray, a supervisor);
- ``servers``: the HTTP API and tool server for ``raydag serve`` (Ray Serve, or a plain process);
- ``serving``: the record of a raydag serving a home (``RAYDAG_HOME/serving.json``), and the rule ``raydag run``,
  ``batch``, ``continue`` and ``raydag.start()`` on that home attach to it by;
- ``ports``: loopback ports bound exclusively, and Serve's proxies made to do the same;
- ``shutdown``: SIGTERM handled as Ctrl-C, and nothing left running behind;
- ``background_server``: an ASGI app on a background thread, bound before it starts;
- ``desk``: ``decisions_desk``, a person's decisions made over the run store without the HTTP API.
"""

"""raydag's runtime: everything that has effects (Ray, PostgreSQL, HTTP, MCP), around the pure core in ``dag``.

Each sub-package is one job; its ``__init__`` maps its modules and names what other packages may use.
Imports point down this list (``make lint`` checks it: ``pyproject.toml``, ``[tool.importlinter]``):

- ``cli``, ``python_api``: the command line and ``import raydag``;
- ``api``: the run API over HTTP (FastAPI on Ray Serve), its views and the run viewer;
- ``launch``: settings, and bringing the runtime up on one machine (database, servers, Ray) and down again;
- ``supervisor``: the ``RunSupervisor`` actor, the only Ray face of ``run``;
- ``run``: a run's logic, Ray-free: submission, the service that owns runs, the driver, the round, recording;
- ``calls``: how a node's call leaves and returns: executors, the ``ToolCaller`` actor, the MCP client;
- ``toolsets``: the toolsets file: servers, overlays, catalogue, pins, resource checks;
- ``store``, ``observe``: PostgreSQL (runs, events, ownership, outbox, migrations); metrics and tracing.

Importing the package loads nothing heavy; Ray is imported only by the modules that use it.
"""

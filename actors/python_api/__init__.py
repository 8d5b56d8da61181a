"""The Python API, imported as ``raydag``: run plans or goals over declared toolsets from a script that
called ``ray.init()`` (or joined a cluster) and get each run back with its nodes and result.

    import ray
    import raydag

    ray.init()
    with raydag.start(toolsets="toolsets.yaml") as rd:
        run = rd.run({"nodes": [...]}, resource={"root": "/srv/reports"})

When a raydag serves the script's ``RAYDAG_HOME`` with the same toolsets (``raydag up``), ``start()`` makes the
block's runs through its HTTP API instead, starting nothing (``attach=False``: in-process all the same).

- ``opening``: ``start``, which picks one of these:
- ``session``: ``Raydag`` (in-process), ``Run``, ``RunRefused``;
- ``attached``: ``AttachedRaydag`` (through the raydag serving the home), ``ServedElsewhere``.

Everything public is re-exported here; the modules behind it may move.
"""

from actors.python_api.attached import ServedElsewhere
from actors.python_api.opening import start
from actors.python_api.session import Raydag, Run, RunRefused
from actors.run.approvals import DecisionRefused
from actors.toolsets import Toolsets, ToolsetsInvalid, load_toolsets
from dag.budget import BudgetRequest
from dag.errors import RaydagError

__all__ = [
    "BudgetRequest",
    "DecisionRefused",
    "Raydag",
    "RaydagError",
    "Run",
    "RunRefused",
    "ServedElsewhere",
    "Toolsets",
    "ToolsetsInvalid",
    "load_toolsets",
    "start",
]

"""``raydag.start()``: a session for a script's block, made through the raydag serving its home when one does
(``actors.python_api.attached``), else in the script's own process (``actors.python_api.session``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.launch.serving import home_in, key_for, serving_for
from actors.launch.settings import Settings, load_settings
from actors.python_api.attached import AttachedRaydag, ServedElsewhere
from actors.python_api.session import Raydag
from actors.toolsets.config import Toolsets


@contextmanager
def start(
    toolsets: Toolsets | str | Path | None = None,
    *,
    tenant: str = "tenant-demo",
    settings: Settings | None = None,
    attach: bool = True,
    api_key: str | None = None,
) -> Iterator[Raydag]:
    """raydag for the block: ``toolsets`` (parsed, or a file's path; default ``RAYDAG_TOOLSETS``, else the
    caseops toolset) over the script's Ray, or a local one; settings from the environment unless given.

    When a raydag serves this ``RAYDAG_HOME`` with the same toolsets (``raydag up``, ``raydag serve``) and
    ``attach`` (the default), the block's runs are made by it over its HTTP API, as ``raydag run`` makes them,
    and nothing starts here: as ``api_key`` (default ``RAYDAG_API_KEY``), else ``tenant``'s development key
    (``ServedElsewhere`` if that raydag takes keys of its own and none is given). Parsed ``toolsets`` or given
    ``settings`` are this process's own: such a session never attaches."""
    attached = _attached(toolsets, tenant, api_key) if attach and settings is None else None
    if attached is not None:
        try:
            yield attached
        finally:
            attached.close()
        return
    from actors.launch.local import local_runtime

    with local_runtime(settings or load_settings(), toolsets=toolsets) as runtime:
        yield Raydag(runtime, tenant, f"script:{os.environ.get('USER', 'operator')}")


def _attached(
    toolsets: Toolsets | str | Path | None, tenant: str, api_key: str | None
) -> AttachedRaydag | None:
    """A session made through the raydag serving this home with these toolsets, if one answers
    (``actors.launch.serving``: the rule ``raydag run`` attaches by); ``None`` otherwise."""
    if isinstance(toolsets, Toolsets):
        return None
    serving = serving_for(os.environ, Path(toolsets) if toolsets is not None else None)
    if serving is None:
        return None
    key = key_for(serving, tenant, api_key or os.environ.get("RAYDAG_API_KEY") or None)
    if key is None:
        raise ServedElsewhere(
            serving.url,
            f"a raydag serves {home_in(os.environ)} at {serving.url} with API keys of its own: give "
            "api_key= (or RAYDAG_API_KEY) to run there, or attach=False to run here",
        )
    return AttachedRaydag(serving.url, key, tenant)

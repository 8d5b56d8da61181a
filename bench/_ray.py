"""The local Ray a benchmark runs on: its own, or the one its process already has (a smoke run shares one)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SMOKE_RAY: dict[str, Any] = {"num_cpus": 8, "namespace": "raydag", "log_to_driver": False}
"""The one Ray of a smoke run (``python -m bench --smoke``): what every benchmark's own would be, roughly."""


@contextmanager
def local_ray(**options: Any) -> Iterator[None]:
    """A local Ray for the block, shut down after it; if this process already runs one, that one, left up.

    Starting Ray costs seconds (ten on a loaded 2-core machine): a smoke run of every benchmark pays it once.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING, **options)
    try:
        yield
    finally:
        ray.shutdown()

"""Smoke mode (``python -m bench --smoke``, or ``BENCH_SMOKE=1``): each benchmark once, on a tiny sample.

It proves that a benchmark still runs end to end and prints its tables; its numbers mean nothing. A test runs
every benchmark this way, so ``bench/`` cannot rot unnoticed.
"""

from __future__ import annotations

import os
from typing import TypeVar

SMOKE = os.environ.get("BENCH_SMOKE") == "1"

_T = TypeVar("_T")


def sized(full: _T, smoke: _T) -> _T:
    """``full`` for a measurement, ``smoke`` for a smoke run."""
    return smoke if SMOKE else full

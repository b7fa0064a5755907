# SPDX-License-Identifier: Apache-2.0
"""headroom.stats: memory reports and their exact reduction across ranks.

A report maps key names to exact int64 or float64 values (PyTorch's ``torch.cuda.memory_stats()``
names where they mean the same, ``keys``). The reductions are headroom's: ``max`` (every key's
exact maximum, integers never pass through floating point) and ``gather`` (every rank's values,
max / min / mean and the rank holding the max). Reports travel as fixed-size int64 words, so a
rank with different keys meets the others in the one collective and every rank raises
``collective_mismatch`` together instead of hanging.

A ``CheckedReport`` (what a dict becomes on the wire) never raises for a value: a bad one (a str,
an int past int64) travels in the same collective as the data, and every rank raises
``invalid_argument`` naming that rank, the key and the value, with the group ready for the next
call. Bools stay bools, and int / bool / float are part of the keys' schema.

This module is torch-free: ``max_of`` / ``gather_of`` reduce reports given every rank's values,
and ``max_with`` / ``gather_with`` run the reduction through any all_reduce(MAX) / all_gather
callable over int64 arrays (``headroom.torch.stats`` passes torch.distributed's).

    >>> from headroom import stats
    >>> peak = stats.max_of([{"allocated_bytes.all.peak": 2**53 + 1}, {"allocated_bytes.all.peak": 2**53}])
    >>> peak["allocated_bytes.all.peak"] == 2**53 + 1
    True
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import numpy as np

from ._core import invalid_argument
from ._core.stats import (
    CheckedReport,
    PhasePeaks,
    RankTable,
    ReducePlan,
    Report,
    StatSummary,
    SteadyState,
    allocator_report_keys,
    gather_of,
    keys,
    max_of,
    memory_report_keys,
    memory_report_schema_hash,
    pack_gather,
    pack_max,
    unpack_gather,
    unpack_max,
)

__all__ = [
    "Report", "CheckedReport", "ReducePlan", "RankTable", "StatSummary", "SteadyState", "PhasePeaks", "keys",
    "MEMORY_REPORT_KEYS", "ALLOCATOR_REPORT_KEYS", "report", "memory_report", "max_of", "gather_of", "pack_max",
    "unpack_max", "pack_gather", "unpack_gather", "max_with", "gather_with", "memory_report_schema_hash",
]

MEMORY_REPORT_KEYS = tuple(memory_report_keys())
ALLOCATOR_REPORT_KEYS = tuple(allocator_report_keys())

ReportLike = Union[Report, CheckedReport, Mapping[str, Any]]


def report(values: Union[Report, Mapping[str, Any]]) -> Report:
    """A Report from a dict (its order is the report's order); ints stay exact int64."""
    return values if isinstance(values, Report) else Report(dict(values))


def _wire_report(values: ReportLike):
    return values if isinstance(values, (Report, CheckedReport)) else CheckedReport(dict(values))


def memory_report(memory_stats: Mapping[str, Any]) -> Report:
    """The keys training dashboards log (``MEMORY_REPORT_KEYS``), in headroom's order, taken
    from a ``torch.cuda.memory_stats()``-style dict: the same schema as the C++
    ``stats::memory_report``, so C++ and Python ranks can reduce it together."""
    missing = [k for k in MEMORY_REPORT_KEYS if k not in memory_stats]
    if missing:
        raise invalid_argument(f"memory_report: keys {missing} are missing from the {len(memory_stats)} given; "
                               f"expected all of {list(MEMORY_REPORT_KEYS)}")
    return Report({k: memory_stats[k] for k in MEMORY_REPORT_KEYS})


def max_with(values: ReportLike, all_reduce_max: Callable[[np.ndarray], np.ndarray], *, rank: int = 0,
             size: int = 1, plan: Optional[ReducePlan] = None, writer: int = -1,
             nan: str = "propagate") -> Optional[Report]:
    """Every key's max across ranks through one ``all_reduce_max(words) -> words`` call.

    Every rank calls it with the same ``plan`` (default: room for this report's keys) and
    ``writer`` (-1: the result on every rank; else only there, None elsewhere). A dict is read
    as a ``CheckedReport``: a bad value on any rank raises on every rank after the one call.
    """
    r = _wire_report(values)
    p = plan if plan is not None else ReducePlan(len(r))
    reduced = np.ascontiguousarray(all_reduce_max(pack_max(r, p, writer, nan, rank)), dtype=np.int64)
    return unpack_max(r, reduced, p, rank, size)


def gather_with(values: ReportLike, all_gather: Callable[[np.ndarray], np.ndarray], *, rank: int = 0,
                size: int = 1, plan: Optional[ReducePlan] = None, writer: int = -1,
                nan: str = "propagate") -> Optional[RankTable]:
    """Every rank's values and a per-key summary through one ``all_gather(words) -> rank-major
    words`` call (``size`` ranks)."""
    r = _wire_report(values)
    p = plan if plan is not None else ReducePlan(len(r))
    gathered = np.ascontiguousarray(all_gather(pack_gather(r, p, writer, rank)), dtype=np.int64).reshape(-1)
    return unpack_gather(r, gathered, p, rank, size, nan)

# SPDX-License-Identifier: Apache-2.0
"""headroom: memory-aware parallel primitives for GPU training engines.

The C++ headers are the product; this package is a thin layer over them (``headroom._core``),
importable with no torch and no CUDA. ``headroom.torch`` holds the PyTorch adapters and imports
torch itself.

Modules: ``pool`` (planners and plans), ``pipeline`` (schedules, memory model, PyTorch's
action format), ``cp`` (context-parallel index plans as numpy arrays), ``stats`` (report schema
and exact reductions), ``trace`` (memory_viz snapshots). Each is imported on first use.
"""
import importlib

from ._core import (
    __version__,
    capacity_error,
    collective_mismatch,
    cuda_error,
    error,
    group_aborted,
    invalid_argument,
    logic_error,
    mpi_error,
    nccl_error,
    version_info,
)

_SUBMODULES = ("pool", "pipeline", "cp", "stats", "trace", "torch")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
    "version_info",
    "error",
    "invalid_argument",
    "capacity_error",
    "logic_error",
    "collective_mismatch",
    "group_aborted",
    "cuda_error",
    "nccl_error",
    "mpi_error",
]

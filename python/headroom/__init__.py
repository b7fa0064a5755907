"""headroom: memory-aware parallel primitives for GPU training engines.

The C++ headers are the product; this package is a thin layer over them (``headroom._core``),
importable with no torch and no CUDA. ``headroom.torch`` holds the PyTorch adapters and imports
torch itself.
"""
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

# SPDX-License-Identifier: Apache-2.0
"""headroom's PyTorch adapters. The only part of the package that imports torch.

Submodules (imported on first use, so ``import headroom.torch`` stays cheap):
``megatron_fsdp`` (a drop-in double-buffer allocator for Megatron-FSDP), ``stats`` (memory
statistics reduced across a process group), ``profile`` (step-gated memory snapshots) and ``cp``
(context-parallel split / gather of packed sequences as torch custom ops), and the drop-ins
``te`` (TransformerEngine's THD index helpers) and ``areal`` (AReaL's CP helpers).
"""
import importlib

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only where torch is missing
    raise ImportError(
        "headroom.torch needs PyTorch (pip install torch); the rest of headroom works without it"
    ) from e

_SUBMODULES = ("megatron_fsdp", "stats", "profile", "cp", "te", "areal")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_SUBMODULES)

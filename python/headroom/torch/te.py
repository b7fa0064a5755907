"""Drop-ins for TransformerEngine's THD context-parallel helpers (``transformer_engine_torch``).

Same names, arguments and results as TE's bindings, computed from headroom's partition (and,
for the reorders, headroom's kernels on CUDA): no TransformerEngine build needed::

    index = thd_get_partitioned_indices(cu_seqlens, total_tokens, cp_size, cp_rank)
    local = tokens.index_select(1, index)        # as Megatron-Core's per-document balancing does

Where TE would read garbage or assert on the device, these raise ``headroom.invalid_argument``
naming the value (a total that is not the last boundary, a sequence not divisible by 2 * cp).
"""
from __future__ import annotations

import torch

from headroom import invalid_argument

from .cp import Partition, _host_cu

__all__ = [
    "thd_get_partitioned_indices",
    "thd_sequence_order_to_cp_rank_order",
    "thd_cp_rank_order_to_sequence_order",
]


def _partition(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int, rank: int, what: str) -> Partition:
    host = _host_cu(cu_seqlens, what)
    if world_size < 1:
        raise invalid_argument(f"{what}: world_size = {world_size}, expected >= 1")
    if total_tokens % (2 * world_size) != 0:
        raise invalid_argument(f"{what}: total_tokens = {total_tokens}, expected a multiple of 2 * world_size = "
                               f"{2 * world_size}")
    last = int(host[-1]) if host.numel() else 0
    if total_tokens != last:
        raise invalid_argument(f"{what}: total_tokens = {total_tokens}, but cu_seqlens[-1] = {last}; expected the "
                               "padded total")
    return Partition(host, world_size, rank)


def thd_get_partitioned_indices(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int,
                                rank: int) -> torch.Tensor:
    """This rank's [total_tokens / world_size] int32 source indices under the dual-chunk layout,
    on cu_seqlens' device (TE: ``tex.thd_get_partitioned_indices``)."""
    p = _partition(cu_seqlens, total_tokens, world_size, rank, "thd_get_partitioned_indices")
    return p.local_index(device=cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else None, dtype=torch.int32)


def thd_sequence_order_to_cp_rank_order(tensor: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int) -> torch.Tensor:
    """Sequence order -> the rank-major concatenation of every rank's local rows (dim 0)."""
    p = _partition(cu_seqlens, tensor.shape[0], cp_size, 0, "thd_sequence_order_to_cp_rank_order")
    return p.to_rank_order(tensor.contiguous())


def thd_cp_rank_order_to_sequence_order(tensor: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int) -> torch.Tensor:
    """Rank-major (an all-gather of the local rows) -> sequence order (dim 0)."""
    p = _partition(cu_seqlens, tensor.shape[0], cp_size, 0, "thd_cp_rank_order_to_sequence_order")
    return p.to_sequence_order(tensor.contiguous())

# SPDX-License-Identifier: Apache-2.0
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

from ._dropin import peer_terms
from .cp import Partition

def _partition(cu_seqlens: torch.Tensor, total: int, size: int, rank: int, what: str, total_name: str = "total_tokens",
               size_name: str = "world_size") -> Partition:
    """The partition TE's function describes, its errors in TE's argument names."""
    if size < 1:
        raise invalid_argument(f"{what}: {size_name} = {size}, expected >= 1")
    if total % (2 * size) != 0:
        raise invalid_argument(f"{what}: {total_name} = {total}, expected a multiple of 2 * {size_name} = {2 * size}")
    pad = f"pad every sequence to a multiple of 2 * {size_name} first (TE's cu_seqlens_padded)"
    with peer_terms(what, pad, {"cp": size_name, "cp_rank": "rank"}):
        p = Partition(cu_seqlens, size, rank)
    if total != p.global_rows:
        raise invalid_argument(f"{what}: {total_name} = {total}, but cu_seqlens[-1] = {p.global_rows}; expected the "
                               "padded total")
    return p


def thd_get_partitioned_indices(cu_seqlens: torch.Tensor, total_tokens: int, world_size: int,
                                rank: int) -> torch.Tensor:
    """This rank's [total_tokens / world_size] int32 source indices under the dual-chunk layout,
    on cu_seqlens' device (TE: ``tex.thd_get_partitioned_indices``)."""
    p = _partition(cu_seqlens, total_tokens, world_size, rank, "thd_get_partitioned_indices")
    return p.local_index(device=cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else None, dtype=torch.int32)


def thd_sequence_order_to_cp_rank_order(tensor: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int) -> torch.Tensor:
    """Sequence order -> the rank-major concatenation of every rank's local rows (dim 0)."""
    p = _partition(cu_seqlens, tensor.shape[0], cp_size, 0, "thd_sequence_order_to_cp_rank_order", "tensor.shape[0]",
                   "cp_size")
    return p.to_rank_order(tensor.contiguous())


def thd_cp_rank_order_to_sequence_order(tensor: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int) -> torch.Tensor:
    """Rank-major (an all-gather of the local rows) -> sequence order (dim 0)."""
    p = _partition(cu_seqlens, tensor.shape[0], cp_size, 0, "thd_cp_rank_order_to_sequence_order", "tensor.shape[0]",
                   "cp_size")
    return p.to_sequence_order(tensor.contiguous())

# SPDX-License-Identifier: Apache-2.0
"""headroom.cp: context-parallel split of packed (THD) sequences, as index plans.

Padding (raw boundaries -> boundaries every layout cuts evenly), partitions in both layouts
(``"dual_chunk"``: the zigzag every framework defaults to; ``"contiguous"``: verl's layout for
linear-attention kernels) and the index plans a torch program needs, as numpy int64 arrays that
``torch.from_numpy(...)`` turns into ``index_select`` indices. All index math is the C++ one
(``headroom._core.cp``), the same the CUDA kernels are tested against.

    >>> from headroom import cp
    >>> plan = cp.index_plan([0, 7, 17], cp_size=2, cp_rank=0)
    >>> plan.padded_cu_seqlens.tolist(), plan.local_cu_seqlens.tolist()
    ([0, 8, 20], [0, 4, 10])
    >>> plan.raw_index.tolist()      # local row t holds raw row raw_index[t] (-1: a pad)
    [0, 1, 6, -1, 7, 8, 9, 16, -1, -1]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ._core.cp import (
    Padding,
    Partition,
    alignment_for,
    pad_split_index,
    shifted_labels,
    total_multiple,
)

__all__ = [
    "Padding", "Partition", "IndexPlan", "alignment_for", "total_multiple", "pad", "partition",
    "pad_split_index", "shifted_labels", "index_plan", "LAYOUTS",
]

LAYOUTS = ("dual_chunk", "contiguous")


def pad(raw_cu_seqlens: Any, layout: str = "dual_chunk", cp: int = 1, *, tp: int = 1, extra: int = 1,
        total_multiple: int = 1) -> Padding:
    """Pads every sequence on the right to ``alignment_for(layout, cp, tp, extra)`` rows.

    ``total_multiple`` > 1 also appends one dummy sequence so the total is a multiple of it.
    """
    return Padding(raw_cu_seqlens, alignment_for(layout, cp, tp, extra), total_multiple)


def partition(padded_cu_seqlens: Any, cp_size: int, cp_rank: int, layout: str = "dual_chunk") -> Partition:
    """Rank ``cp_rank``'s share of a padded batch (padded lengths must suit the layout)."""
    return Partition(padded_cu_seqlens, cp_size, cp_rank, layout)


@dataclass(frozen=True)
class IndexPlan:
    """Everything one CP rank needs to split a packed batch with ``index_select``.

    global_index[t]     padded global row of local row t (TE's thd_get_partitioned_indices)
    raw_index[t]        raw (unpadded) row of local row t, -1 for pads: split without padding first
    label_index[t]      raw row of the next-token label of local row t, -1 where it is a pad
    loss_mask[t]        1 where that label counts (0: last token of a sequence, pads), or the
                        raw loss mask's value at the label
    gather_index[g]     row of the rank-major all-gather output that holds global row g
    """

    padding: Padding
    partition: Partition
    padded_cu_seqlens: np.ndarray
    local_cu_seqlens: np.ndarray
    global_index: np.ndarray
    raw_index: np.ndarray
    label_index: np.ndarray
    loss_mask: np.ndarray
    gather_index: np.ndarray

    @property
    def local_rows(self) -> int:
        return self.partition.local_rows


def index_plan(raw_cu_seqlens: Any, cp_size: int, cp_rank: int, layout: str = "dual_chunk", *, tp: int = 1,
               extra: int = 1, total_multiple: int = 1, raw_loss_mask: Optional[Any] = None) -> IndexPlan:
    """Pads ``raw_cu_seqlens`` for ``layout`` at ``cp_size`` and returns rank ``cp_rank``'s plan."""
    pd = pad(raw_cu_seqlens, layout, cp_size, tp=tp, extra=extra, total_multiple=total_multiple)
    p = Partition(pd.padded_cu_seqlens, cp_size, cp_rank, layout)
    labels, mask = shifted_labels(pd, p, None, raw_loss_mask, -1)
    return IndexPlan(
        padding=pd,
        partition=p,
        padded_cu_seqlens=pd.padded_cu_seqlens,
        local_cu_seqlens=p.local_cu_seqlens,
        global_index=p.local_index(),
        raw_index=pad_split_index(pd, p),
        label_index=labels,
        loss_mask=mask,
        gather_index=p.gather_index(),
    )

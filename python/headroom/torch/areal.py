# SPDX-License-Identifier: Apache-2.0
"""Drop-ins for AReaL's packed context-parallel helpers
(``areal.engine.megatron_utils.packed_context_parallel``).

Same names and argument order as AReaL 1.0.4, same results, with headroom's partition and ops
underneath (one index plan per batch instead of a Python loop with ``.item()`` per sequence).
Like AReaL's, they take the CP size, rank and group from Megatron's ``parallel_state`` when it is
importable; ``cp_size=``, ``cp_rank=``, ``cp_group=`` keywords override it (and are required
without Megatron)::

    labels = cp_local_labels(padded_input_ids, padded_cu_seqlens)          # AReaL #1223's roll + split
    local = split_packed_seqs_for_context_parallel(loss_mask, padded_cu_seqlens)
    logprobs = reassemble_cp_packed_logprobs(local_logprobs, padded_cu_seqlens)
"""
from __future__ import annotations

from typing import Optional

import torch

from headroom import invalid_argument

from ._dropin import peer_terms
from .cp import Partition, gather

__all__ = [
    "preprocess_packed_seqs_context_parallel",
    "split_packed_seqs_for_context_parallel",
    "cp_local_labels",
    "build_cp_reassemble_indices",
    "reassemble_cp_packed_logprobs",
    "postprocess_packed_seqs_context_parallel",
]


def _mpu():
    try:
        from megatron.core import parallel_state
    except ImportError:
        return None
    return parallel_state


def _cp(what: str, cp_size: Optional[int], cp_rank: Optional[int], cp_group=None, need_group: bool = False):
    """(cp_size, cp_rank, group) from the keywords, else from Megatron's parallel_state."""
    mpu = _mpu()
    if mpu is None:
        missing = [n for n, v in (("cp_size", cp_size), ("cp_rank", cp_rank)) if v is None]
        if need_group and cp_group is None and (cp_size is None or cp_size > 1):
            missing.append("cp_group")
        if missing:
            group = " (the context-parallel torch.distributed process group)" if "cp_group" in missing else ""
            raise invalid_argument(f"{what}: {', '.join(missing)} not given, and Megatron's parallel_state, where AReaL "
                                   f"finds them, is not importable; pass {'=, '.join(missing)}={group}")
    else:
        cp_size = mpu.get_context_parallel_world_size() if cp_size is None else cp_size
        cp_rank = mpu.get_context_parallel_rank() if cp_rank is None else cp_rank
        if need_group and cp_group is None and cp_size > 1:
            cp_group = mpu.get_context_parallel_group()
    return int(cp_size), int(cp_rank), cp_group


# AReaL pads with areal.utils.data.pad_packed_tensor_dict before these helpers.
_PAD = "pad first (AReaL: pad_packed_tensor_dict with seq_align_to = tp_size * cp_size * 2)"


def _partition(cu_seqlens: torch.Tensor, cp_size: int, cp_rank: int, what: str) -> Partition:
    with peer_terms(what, _PAD, {"cp": "cp_size"}):
        return Partition(cu_seqlens, cp_size, cp_rank)


def preprocess_packed_seqs_context_parallel(input_ids: torch.Tensor, cu_seqlens: torch.Tensor, *,
                                            cp_size: Optional[int] = None, cp_rank: Optional[int] = None,
                                            tp_size: Optional[int] = None):
    """(this rank's input_ids as [1, T/cp], PackedSeqParams) for already padded input (AReaL)."""
    what = "preprocess_packed_seqs_context_parallel"
    cp_size, cp_rank, _ = _cp(what, cp_size, cp_rank)
    if tp_size is None:
        mpu = _mpu()
        tp_size = mpu.get_tensor_model_parallel_world_size() if mpu is not None else 1
    from megatron.core.packed_seq_params import PackedSeqParams

    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    align = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    bad = [n for n in lens if n % align]
    if bad:
        raise invalid_argument(f"{what}: sequence lengths {bad} are not multiples of {align} (tp * cp * 2); pad first")
    max_seqlen = max(lens) if lens else 0
    params = PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu_seqlens, max_seqlen_q=max_seqlen,
                             cu_seqlens_kv=cu_seqlens, max_seqlen_kv=max_seqlen, cu_seqlens_q_padded=cu_seqlens,
                             cu_seqlens_kv_padded=cu_seqlens)
    if cp_size <= 1:
        return input_ids.unsqueeze(0), params
    with peer_terms(what, _PAD, {"input": "input_ids"}):
        return _partition(cu_seqlens, cp_size, cp_rank, what).split(input_ids.contiguous()).unsqueeze(0), params


def split_packed_seqs_for_context_parallel(tensor: torch.Tensor, cu_seqlens: torch.Tensor, *,
                                           cp_size: Optional[int] = None,
                                           cp_rank: Optional[int] = None) -> torch.Tensor:
    """This rank's rows of a padded packed tensor (dim 0); unchanged at cp <= 1 (AReaL)."""
    what = "split_packed_seqs_for_context_parallel"
    cp_size, cp_rank, _ = _cp(what, cp_size, cp_rank)
    if cp_size <= 1:
        return tensor
    with peer_terms(what, _PAD, {"input": "tensor"}):
        return _partition(cu_seqlens, cp_size, cp_rank, what).split(tensor.contiguous())


def cp_local_labels(input_ids: torch.Tensor, cu_seqlens: torch.Tensor, *, cp_size: Optional[int] = None,
                    cp_rank: Optional[int] = None) -> torch.Tensor:
    """``split_packed_seqs_for_context_parallel(torch.roll(input_ids, -1, dims=-1), cu_seqlens)``:
    AReaL's CP-local labels (megatron_engine, #1223), the roll done on the global padded buffer."""
    return split_packed_seqs_for_context_parallel(torch.roll(input_ids, shifts=-1, dims=-1), cu_seqlens,
                                                  cp_size=cp_size, cp_rank=cp_rank)


def build_cp_reassemble_indices(padded_cu_seqlens: torch.Tensor, cp_size: int) -> torch.Tensor:
    """indices[dst] = src into torch.cat(all-gathered local tensors) (AReaL's
    ``_build_cp_reassemble_indices``), int64 on padded_cu_seqlens' device."""
    what = "build_cp_reassemble_indices"
    return _partition(padded_cu_seqlens, cp_size, 0, what).gather_index(device=padded_cu_seqlens.device)


_build_cp_reassemble_indices = build_cp_reassemble_indices


def reassemble_cp_packed_logprobs(local_tensor: torch.Tensor, padded_cu_seqlens: torch.Tensor, *,
                                  cp_size: Optional[int] = None, cp_rank: Optional[int] = None,
                                  cp_group=None) -> torch.Tensor:
    """All-gather CP-local tensors and put them in sequence order; backward reduce-scatters
    (AReaL #1249). Returns local_tensor itself at cp <= 1."""
    what = "reassemble_cp_packed_logprobs"
    cp_size, cp_rank, group = _cp(what, cp_size, cp_rank, cp_group, need_group=True)
    if cp_size <= 1:
        return local_tensor
    with peer_terms(what, _PAD, {"local input": "local_tensor"}):
        return gather(local_tensor.contiguous(), _partition(padded_cu_seqlens, cp_size, cp_rank, what), group)


def postprocess_packed_seqs_context_parallel(output: torch.Tensor, cu_seqlens: Optional[torch.Tensor],
                                             post_process: bool, gather_output: bool = True, *,
                                             cp_size: Optional[int] = None, cp_rank: Optional[int] = None,
                                             cp_group=None) -> torch.Tensor:
    """[1, T/cp, ...] model output -> [T, ...] in sequence order on every rank (peers' rows
    detached: only this rank's gradient flows, as in AReaL); the local [T/cp, ...] when
    gather_output is False; output unchanged when not post_process."""
    if not post_process:
        return output
    what = "postprocess_packed_seqs_context_parallel"
    cp_size, cp_rank, group = _cp(what, cp_size, cp_rank, cp_group, need_group=True)
    if cp_size <= 1 or cu_seqlens is None or not gather_output:
        return output.squeeze(0)
    with peer_terms(what, _PAD, {"local input": "output"}):
        return gather(output.squeeze(0).contiguous(), _partition(cu_seqlens, cp_size, cp_rank, what), group,
                      gradient="local")

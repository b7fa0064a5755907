# SPDX-License-Identifier: Apache-2.0
"""Context-parallel split / gather of packed (THD, ``cu_seqlens``) batches as torch custom ops.

Every op is in the ``headroom`` namespace with a fake implementation (``torch.compile`` traces
through it with no graph break) and an autograd formula through its adjoint: the split and reorder
ops registered from C++ by ``headroom._torch_ops`` (LibTorch stable ABI) when the package was built
with torch, else ``torch.library.custom_op``s defined in Python. On CUDA tensors the ops launch
headroom's kernels (``headroom._cuda``: no index tensor in memory, on the current stream); on CPU
they are torch index ops driven by the same C++ index plan, so ``torch.library.opcheck`` runs on
CPU-only machines. This module is the public surface; the machinery is private
(``_cp_plans``: the per-batch plans; ``_cp_ops``: the ops, fakes and autograd; ``_cp_gather``).

A :class:`Partition` is built once per batch from ``cu_seqlens`` and reused by every op::

    part = Partition(cu_seqlens_padded, cp_size, cp_rank)        # or Partition.from_raw(raw_cu, ...)
    local = part.split(hidden)                                   # [T, ...] -> [T/cp, ...]
    labels, mask = part.shifted_label_split(raw_ids, raw_mask)   # from raw, unpadded ids
    full = gather(local_logprobs, part, group)                   # sequence order on every rank, differentiable

Any dtype and row width (the trailing dimensions are opaque). Bad input raises
``headroom.invalid_argument`` (a ValueError) naming the value and what was expected.
"""
from __future__ import annotations

import enum
from typing import Callable, NamedTuple, Optional, Union

import torch

import headroom
from headroom import invalid_argument

from ._cp_gather import _GATHER_METHODS, _Gather, _agree, _check_group, _gather
from ._cp_ops import (_call, _grad_enabled, _is_compiling, _pad_split_grad, _pad_split_impl, _pad_split_op,
                      _split_adjoint_grad, _split_adjoint_impl, _split_adjoint_op, _split_grad, _split_impl, _split_op,
                      _to_rank_order_grad, _to_rank_order_impl, _to_rank_order_op, _to_sequence_order_grad,
                      _to_sequence_order_impl, _to_sequence_order_op)
from ._cp_plans import _Entry, _check_rows, _checked_layout, _host_cu, _register, _registered

__all__ = [
    "Partition",
    "GatherOutput",
    "CollectedOutput",
    "gather",
    "collect_output",
    "split",
    "split_adjoint",
    "to_sequence_order",
    "to_rank_order",
    "pad_split",
    "shifted_label_split",
]

# ---- the partition: built once per batch ----------------------------------------------------------------


class Partition:
    """One CP rank's share of a packed batch, built once from ``cu_seqlens`` and reused: a
    ``headroom.cp.Partition`` (the C++ one, :attr:`partition`) with the torch ops.

    ``Partition(padded_cu_seqlens, cp_size, cp_rank)`` takes boundaries already padded so that the
    layout can cut them (every sequence a multiple of ``2 * cp_size`` for ``dual_chunk``);
    :meth:`from_raw` pads raw boundaries itself and adds :meth:`pad_split` and
    :meth:`shifted_label_split`. ``cu_seqlens`` may be a tensor (int32 or int64, any device: read
    once here) or a list.
    """

    def __init__(self, cu_seqlens, cp_size: int, cp_rank: int, *, layout: str = "dual_chunk"):
        what = "headroom.torch.cp.Partition"
        self._cu = _host_cu(cu_seqlens, what)
        self._raw_cu = self._raw_plan = None
        self._padded = _register(self._cu, (int(cp_size), int(cp_rank), layout, None),
                                 _Entry(self._cu.tolist(), self._cu._version, int(cp_size), int(cp_rank),
                                        _checked_layout(layout, what)))
        self._op_args()

    @classmethod
    def from_raw(cls, raw_cu_seqlens, cp_size: int, cp_rank: int, *, layout: str = "dual_chunk", tp: int = 1,
                 extra: int = 1, total_multiple: int = 1) -> "Partition":
        """Pads every sequence to lcm(2 * cp_size * tp, extra) (``dual_chunk``; cp_size * tp for
        ``contiguous``) and the total to ``total_multiple`` with one dummy sequence (AReaL)."""
        what = "headroom.torch.cp.Partition.from_raw"
        self = cls.__new__(cls)
        self._raw_cu = _host_cu(raw_cu_seqlens, what)
        key = (int(cp_size), int(cp_rank), _checked_layout(layout, what), (int(tp), int(extra), int(total_multiple)))
        self._raw_plan = _register(self._raw_cu, key, _Entry(self._raw_cu.tolist(), self._raw_cu._version, *key))
        self._cu = torch.from_numpy(self._raw_plan.padding.padded_cu_seqlens).clone()
        self._padded = _register(self._cu, key[:3] + (None,),
                                 _Entry(self._cu.tolist(), self._cu._version, *key[:3]))
        self._op_args()
        return self

    def _op_args(self):
        self._agreed = set()  # (dtype, width) of the gathers the group agreed on (see gather)
        # The ops' arguments after the tensor, built once: the methods pass them as they are.
        cp_size, cp_rank, layout, _ = self._padded.args
        self._split_args = (self._cu, cp_size, cp_rank, layout)
        self._order_args = (self._cu, cp_size, layout)
        self._seq = self._padded if cp_rank == 0 else None  # rank 0's plan (see _rank0)
        self._pad_args = None if self._raw_plan is None else self._raw_args("headroom.torch.cp.Partition")[1]

    # -- what it is
    cp_size = property(lambda self: self._padded.args[0])
    cp_rank = property(lambda self: self._padded.args[1])
    layout = property(lambda self: self._padded.args[2])
    global_rows = property(lambda self: self._padded.global_rows, doc="Padded rows of the whole batch (T).")
    local_rows = property(lambda self: self._padded.local_rows, doc="This rank's rows (T / cp_size).")
    sequences = property(lambda self: self._padded.partition.sequences)

    @property
    def partition(self) -> "headroom.cp.Partition":
        """The ``headroom.cp.Partition`` (the C++ partition) this one is built on: the same
        batch and rank, without the torch ops."""
        return self._padded.partition

    @property
    def cu_seqlens(self) -> torch.Tensor:
        """Global padded boundaries (int64, CPU): what attention kernels take as cu_seqlens_padded."""
        return self._cu

    @property
    def local_cu_seqlens(self) -> torch.Tensor:
        """This rank's boundaries in its local buffer (int64, CPU)."""
        return torch.from_numpy(self._padded.partition.local_cu_seqlens).clone()

    @property
    def raw_cu_seqlens(self) -> Optional[torch.Tensor]:
        """The raw boundaries of :meth:`from_raw` (int64, CPU), else None."""
        return self._raw_cu

    @property
    def raw_rows(self) -> int:
        return self._raw_args("headroom.torch.cp.Partition.raw_rows")[0].raw_rows

    def for_rank(self, rank: int) -> "Partition":
        """The same batch seen from another rank."""
        cp_size, _, layout, raw = (self._raw_plan or self._padded).args
        if raw is not None:
            return Partition.from_raw(self._raw_cu, cp_size, rank, layout=layout, tp=raw[0], extra=raw[1],
                                      total_multiple=raw[2])
        return Partition(self._cu, cp_size, rank, layout=layout)

    def local_index(self, device=None, dtype=torch.int64) -> torch.Tensor:
        """This rank's global source row of every local row (TE's partitioned indices)."""
        return torch.from_numpy(self._padded.partition.local_index()).to(device=device, dtype=dtype)

    def gather_index(self, device=None, dtype=torch.int64) -> torch.Tensor:
        """out[g] = rank_major[gather_index[g]] (AReaL's reassemble indices)."""
        return torch.from_numpy(self._padded.partition.gather_index()).to(device=device, dtype=dtype)

    def __repr__(self) -> str:
        plan = self._raw_plan or self._padded
        return f"headroom.torch.cp.Partition({plan.partition!r}{' from ' + repr(plan.padding) if plan.padding else ''})"

    # -- ops
    def _rank0(self) -> Optional[_Entry]:
        """The plan the reorders use (rank 0's: they cover every rank): this partition's own at rank
        0, else the one the first reorder registered, kept once found (a lookup costs every call);
        None before that and while compiling (dynamo would guard on the attribute): the op finds it."""
        if _is_compiling():
            return None
        e = self._seq
        if e is None or e.version != self._cu._version:  # cu_seqlens changed in place: find the rebuilt plan
            cp_size, _, layout, _ = self._padded.args
            e = self._seq = _registered(self._cu, (cp_size, 0, layout, None))
        return e

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """Global padded [T, ...] -> this rank's [T/cp, ...]."""
        return _call(_split_op, _split_impl, _split_grad, x, self._padded, self._split_args)

    def split_adjoint(self, y: torch.Tensor) -> torch.Tensor:
        """This rank's [T/cp, ...] back to [T, ...], zeros in the rows other ranks hold."""
        return _call(_split_adjoint_op, _split_adjoint_impl, _split_adjoint_grad, y, self._padded, self._split_args)

    def to_sequence_order(self, x: torch.Tensor) -> torch.Tensor:
        """Rank-major [T, ...] (an all-gather of every rank's local rows) -> sequence order."""
        return _call(_to_sequence_order_op, _to_sequence_order_impl, _to_sequence_order_grad, x, self._rank0(),
                     self._order_args)

    def to_rank_order(self, x: torch.Tensor) -> torch.Tensor:
        """Sequence order -> rank-major (TE's thd_sequence_order_to_cp_rank_order)."""
        return _call(_to_rank_order_op, _to_rank_order_impl, _to_rank_order_grad, x, self._rank0(),
                     self._order_args)

    def _raw_args(self, what: str):
        if self._raw_plan is None:
            raise headroom.logic_error(f"{what}: this partition was built from padded cu_seqlens; use Partition.from_raw")
        cp_size, cp_rank, layout, (tp, extra, total_multiple) = self._raw_plan.args
        return self._raw_plan, (self._raw_cu, cp_size, cp_rank, layout, tp, extra, total_multiple)

    def pad_split(self, raw: torch.Tensor, pad_value: float = 0, shift: int = 0) -> torch.Tensor:
        """split(pad(raw)) in one pass from raw, unpadded [T_raw, ...]. shift = 1: the next token
        of the same sequence (labels), pad_value past each sequence's last real token."""
        if self._pad_args is None:
            self._raw_args("headroom.torch.cp.Partition.pad_split")  # raises: not from_raw
        return _call(_pad_split_op, _pad_split_impl, _pad_split_grad, raw, self._raw_plan,
                     self._pad_args + (float(pad_value), int(shift)))

    def shifted_label_split(self, raw_ids: torch.Tensor, raw_loss_mask: Optional[torch.Tensor] = None,
                            pad_value: float = 0):
        """This rank's next-token labels and loss mask from raw ids (and an optional raw mask):
        mask = raw_mask of the label token, 0 at every sequence's last real token and every pad,
        so no cross-sequence or padded label counts. Returns (labels, mask); mask is bool when no
        raw mask is given, else raw_loss_mask's dtype."""
        if raw_ids.dim() < 1:
            raise invalid_argument(f"headroom.torch.cp.shifted_label_split: raw ids are a 0-d tensor, expected "
                                   f"[{self.raw_rows}, ...] (one row per raw token)")
        if raw_loss_mask is None:
            raw_loss_mask = torch.ones(raw_ids.shape[0], dtype=torch.bool, device=raw_ids.device)
        elif raw_loss_mask.device != raw_ids.device:
            raise invalid_argument(f"headroom.torch.cp.shifted_label_split: loss mask on {raw_loss_mask.device}, "
                                   f"ids on {raw_ids.device}; expected one device")
        return self.pad_split(raw_ids, pad_value, 1), self.pad_split(raw_loss_mask, 0, 1)


def split(x: torch.Tensor, partition: Partition) -> torch.Tensor:
    return partition.split(x)


def split_adjoint(y: torch.Tensor, partition: Partition) -> torch.Tensor:
    return partition.split_adjoint(y)


def to_sequence_order(x: torch.Tensor, partition: Partition) -> torch.Tensor:
    return partition.to_sequence_order(x)


def to_rank_order(x: torch.Tensor, partition: Partition) -> torch.Tensor:
    return partition.to_rank_order(x)


def pad_split(raw: torch.Tensor, partition: Partition, pad_value: float = 0, shift: int = 0) -> torch.Tensor:
    return partition.pad_split(raw, pad_value, shift)


def shifted_label_split(raw_ids: torch.Tensor, partition: Partition, raw_loss_mask: Optional[torch.Tensor] = None,
                        pad_value: float = 0):
    return partition.shifted_label_split(raw_ids, raw_loss_mask, pad_value)


# ---- gather over a torch.distributed group, and the last stage's output policy ------------------------


def gather(local: torch.Tensor, partition: Partition, group=None, *, gradient: str = "reduce_scatter",
           method: str = "auto", check: bool = True) -> torch.Tensor:
    """Every rank's [T/cp, ...] -> [T, ...] in sequence order on every rank (all-gather, then the
    reorder kernel). ``gradient="reduce_scatter"`` (the adjoint): rank r's gradient is the sum
    over ranks of split_r(dy_k), so a loss computed identically on every rank gets a factor cp
    (AReaL's reassemble_cp_packed_logprobs; count tokens over DP x CP to cancel it).
    ``gradient="local"``: the peers' rows are detached and only this rank's gradient flows back
    (AReaL's postprocess_packed_seqs_context_parallel), no collective in backward.

    ``check=True``: the first gather of each (partition, dtype, row width) agrees across the group
    first (one all_gather of 9 int64 per rank: cu_seqlens fingerprint, layout, cp rank and size,
    dtype, width); ranks that differ raise ``headroom.collective_mismatch`` on every rank with both
    ranks' values. Build partitions on every rank alike: the check runs on the ranks whose
    partition has not passed it yet. ``check=False`` skips it (a mismatch then returns scrambled
    rows or aborts in the backend).

    ``method`` (CUDA tensors; CPU tensors always take "all_gather"): "all_gather" gathers rank-major
    then reorders (one more [T, ...] buffer and pass); "pipelined" places this rank's rows from
    ``local`` beside the all-gather and only the peers' rows after it; "in_place" (dual_chunk, NCCL)
    sends each chunk straight to its rows on every peer, no second buffer; "auto" picks by size.
    The contiguous layout all-gathers straight into the result whatever the method."""
    what = "headroom.torch.cp.gather"
    if gradient not in ("reduce_scatter", "local"):
        raise invalid_argument(f"{what}: gradient = {gradient!r}, expected 'reduce_scatter' or 'local'")
    if method not in _GATHER_METHODS:
        raise invalid_argument(f"{what}: method = {method!r}, expected one of {', '.join(map(repr, _GATHER_METHODS))}")
    if partition.cp_size == 1:
        return partition.to_sequence_order(local)
    if check:
        _agree(local, partition, group, what)
    else:
        _check_group(partition, group, what)
        _check_rows(local, partition.local_rows, what, "local input", "this rank's rows")
    if local.requires_grad and _grad_enabled():
        return _Gather.apply(local, partition, group, gradient == "reduce_scatter", method)
    return _gather(local, partition, group, method)


class GatherOutput(str, enum.Enum):
    """What the last stage returns (docs/cp.md, 'gather_output')."""

    FULL = "full"  #: every rank gets [T, ...] in sequence order
    NONE = "none"  #: the local shard and its local cu_seqlens (compute the loss there)
    PER_TOKEN = "per_token"  #: per-token vectors computed on the shard, only those gathered


class CollectedOutput(NamedTuple):
    rows: torch.Tensor  #: [T, ...] in sequence order, or the local [T/cp, ...] under NONE
    cu_seqlens: torch.Tensor  #: the boundaries of `rows` (global padded, or this rank's local)


def collect_output(output: torch.Tensor, partition: Partition, group=None,
                   policy: Union[GatherOutput, str] = GatherOutput.PER_TOKEN,
                   per_token: Optional[Callable[[torch.Tensor], torch.Tensor]] = None, *,
                   gradient: str = "reduce_scatter") -> CollectedOutput:
    """The last stage's single entry point under a gather_output policy.

    ``per_token`` maps the local output [T/cp, ...] to per-token vectors [T/cp, k] (log-probs,
    entropy) under PER_TOKEN; only those are gathered, never the logits."""
    what = "headroom.torch.cp.collect_output"
    try:
        policy = GatherOutput(policy)
    except ValueError:
        raise invalid_argument(f"{what}: policy = {policy!r}, expected 'full', 'none' or 'per_token'") from None
    if policy is GatherOutput.NONE:
        _check_rows(output, partition.local_rows, what, "local output", "this rank's rows")
        return CollectedOutput(output, partition.local_cu_seqlens)
    if policy is GatherOutput.PER_TOKEN:
        if per_token is None:
            raise invalid_argument(f"{what}: policy 'per_token' needs per_token (local output -> [T/cp, k] vectors)")
        vectors = per_token(output)
        if vectors.dim() < 1 or vectors.shape[0] != partition.local_rows:
            raise invalid_argument(f"{what}: per_token returned shape {tuple(vectors.shape)}, expected "
                                   f"[{partition.local_rows}, ...] (one vector per local row)")
        return CollectedOutput(gather(vectors.contiguous(), partition, group, gradient=gradient), partition.cu_seqlens)
    return CollectedOutput(gather(output, partition, group, gradient=gradient), partition.cu_seqlens)

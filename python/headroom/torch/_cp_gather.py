# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp's gather over a torch.distributed group (private): the agreement before the
first gather of a batch, the forward by method, and its autograd node. The public entry is
:func:`headroom.torch.cp.gather`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch

import headroom
from headroom import invalid_argument

from ._cp_ops import _dispatch_modes, _is_compiling
from ._cp_plans import _LAYOUTS, _check_rows, _cuda, _launch_args, _on_device, _width

if TYPE_CHECKING:
    from .cp import Partition


def _group_error(partition: Partition, group, what: str) -> Optional[str]:
    import torch.distributed as dist

    size = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if size != partition.cp_size or rank != partition.cp_rank:
        return (f"{what}: the group has rank {rank} of {size}, the partition is rank {partition.cp_rank} of cp_size "
                f"{partition.cp_size}")
    return None


_GATHER_METHODS = ("auto", "all_gather", "pipelined", "in_place")
# "auto" on CUDA: below this many bytes a gather is latency-bound (per-token vectors), so one
# all-gather and one reorder launch; from this mean message size on (dual_chunk) each chunk is sent
# straight to its rows (cp/cuda/in_place_gather.cuh: 0.97x the all-gather at ~250 MB messages,
# 1.32x at 6.5 MB, 2x H200); between, the pipelined gather.
_SMALL_GATHER_BYTES = 1 << 20
_IN_PLACE_MESSAGE_BYTES = 64 << 20


# torch dtypes by a number every rank computes alike (the same torch on every rank), for the agreement.
_DTYPES = sorted({v for v in vars(torch).values() if isinstance(v, torch.dtype)}, key=str)
_AGREE_FIELDS = ("cp_rank", "cp_size", "layout", "rows", "sequences", "cu_seqlens fingerprint", "dtype", "width")


def _describe(values) -> str:
    rank, cp_size, layout, rows, sequences, fp, dtype, width = values
    return (f"cp rank {rank} of {cp_size}, layout {_LAYOUTS[layout]}, {rows} rows in {sequences} sequences "
            f"(cu_seqlens fingerprint {fp:#x}), dtype {_DTYPES[dtype]}, width {width}")


def _agree(local: torch.Tensor, partition: Partition, group, what: str) -> None:
    """Before the first gather of a (partition, dtype, width): every rank checks its own arguments,
    then one all_gather of a few int64 per rank, so that a rank with bad input, or ranks that
    describe different batches (cu_seqlens, layout, dtype, row width), raise on every rank instead
    of a scrambled result or an aborted process. Kept per partition once it passed."""
    import torch.distributed as dist

    key = (local.dtype, _width(local))
    if key in partition._agreed:
        return
    error = _group_error(partition, group, what)
    if error is None:
        try:
            _check_rows(local, partition.local_rows, what, "local input", "this rank's rows")
        except invalid_argument as e:
            error = str(e)
    world = dist.get_world_size(group)
    e = partition._padded
    mine = [0 if error is None else 1, partition.cp_rank, partition.cp_size, _LAYOUTS.index(partition.layout),
            e.global_rows, e.partition.sequences, e.partition.fingerprint(0, 1),  # the boundaries' part
            _DTYPES.index(local.dtype), key[1]]
    device = local.device if local.is_cuda else torch.device("cpu")
    out = torch.empty(world * len(mine), dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(out, torch.tensor(mine, dtype=torch.int64, device=device), group=group)
    ranks = out.view(world, len(mine)).tolist()
    if error is not None:
        raise invalid_argument(error)
    me = dist.get_rank(group)
    failed = [r for r, v in enumerate(ranks) if v[0]]
    if failed:
        raise headroom.collective_mismatch(f"{what} on rank {me}: rank(s) {failed} of the group rejected their "
                                           "arguments (see their error); no data moved")
    for r, v in enumerate(ranks):  # every field but the rank (checked against the group above) must match
        if v[2:] != ranks[me][2:]:
            diff = [f for f, a, b in zip(_AGREE_FIELDS[1:], v[2:], ranks[me][2:]) if a != b]
            a, b = sorted((me, r))
            raise headroom.collective_mismatch(
                f"{what} on rank {me}: ranks {a} and {b} describe different batches ({', '.join(diff)} differ): "
                f"rank {a} has {_describe(ranks[a][1:])}; rank {b} has {_describe(ranks[b][1:])}; no data moved")
    partition._agreed.add(key)


def _check_group(partition: Partition, group, what: str) -> None:
    """The group check alone (gather(check=False)), once per partition and group."""
    import torch.distributed as dist

    key = group if group is not None else dist.group.WORLD
    if partition.__dict__.get("_group_checked") is key:
        return
    error = _group_error(partition, group, what)
    if error is not None:
        raise invalid_argument(error)
    partition._group_checked = key


def _gather(local, partition, group, method):
    """The forward: [T/cp, ...] -> [T, ...] by the method (see gather)."""
    import torch.distributed as dist

    e, cp_size, rank = partition._padded, partition.cp_size, partition.cp_rank
    rows, shape = partition.local_rows, local.shape
    out = local.new_empty((e.global_rows, *shape[1:]))
    if partition.layout == "contiguous":  # rank-major is sequence order: the all-gather lands in place
        dist.all_gather_into_tensor(out, local, group=group)
        return out
    fast = local.is_cuda and type(local) is torch.Tensor and not _is_compiling() and _dispatch_modes() == 0
    if fast and method == "auto":
        nbytes = local.numel() * local.element_size() * cp_size
        if nbytes < _SMALL_GATHER_BYTES:
            method = "all_gather"
        else:
            messages = 2 * sum(1 for a, b in zip(e.host_cu, e.host_cu[1:]) if b > a)  # 2 chunks per sequence
            big = messages and nbytes // (cp_size * messages) >= _IN_PLACE_MESSAGE_BYTES
            method = "in_place" if big and dist.get_backend(group) == "nccl" else "pipelined"
    if not fast or method == "all_gather":
        rank_major = local.new_empty(out.shape)
        dist.all_gather_into_tensor(rank_major, local, group=group)
        if not fast:
            return partition.to_sequence_order(rank_major)
        e0 = partition._rank0() or e
        if a := _launch_args(e0, rank_major, e.global_rows, out, e.global_rows):
            with _on_device(rank_major):
                _cuda.to_sequence_order(e0.partition, e0.cu, *a)
        return out
    if method == "in_place":
        cu = e.host_cu
        peers = [dist.get_global_rank(group, q) if group is not None else q for q in range(cp_size)]
        ops = []
        for q in range(cp_size):
            if q == rank:
                continue
            for i in range(len(cu) - 1):
                c = (cu[i + 1] - cu[i]) // (2 * cp_size)  # rows of one chunk
                if c == 0:
                    continue
                l0 = cu[i] // cp_size  # this rank's chunk `rank`, then its chunk 2 cp - 1 - rank
                # NCCL pairs the k-th send to a peer with the peer's k-th recv from us: one order on both sides.
                ops += [dist.P2POp(dist.isend, local[l0:l0 + c], peers[q], group),
                        dist.P2POp(dist.isend, local[l0 + c:l0 + 2 * c], peers[q], group),
                        dist.P2POp(dist.irecv, out[cu[i] + q * c:cu[i] + (q + 1) * c], peers[q], group),
                        dist.P2POp(dist.irecv, out[cu[i] + (2 * cp_size - 1 - q) * c:cu[i] + (2 * cp_size - q) * c],
                                   peers[q], group)]
        works = dist.batch_isend_irecv(ops) if ops else []
        _place(e, local, rank, out)  # own rows, beside the messages
        for w in works:
            w.wait()
        return out
    # pipelined: the all-gather into a rank-major workspace; own rows placed from `local` meanwhile
    workspace = local.new_empty(out.shape)
    work = dist.all_gather_into_tensor(workspace, local, group=group, async_op=True)
    _place(e, local, rank, out)
    work.wait()  # the current stream waits for the all-gather; the host does not
    if rank > 0:
        _place(e, workspace[:rank * rows], 0, out)
    if rank + 1 < cp_size:
        _place(e, workspace[(rank + 1) * rows:], rank + 1, out)
    return out


def _place(e, rank_major, rank0: int, out):
    """Whole ranks' rows, rank-major from rank0 on, to their sequence positions in out (no other row
    written), one tile per block: a collective running beside gets SMs as blocks retire."""
    rows = rank_major.shape[0]
    if a := _launch_args(e, rank_major, rows, out, e.global_rows):
        with _on_device(rank_major):
            _cuda.place(e.partition, e.cu, *a, rank0, 0, e.local_rows, True)


class _Gather(torch.autograd.Function):
    """The gather (see _gather). Backward: the adjoint (reorder back, reduce-scatter), or this
    rank's rows only."""

    @staticmethod
    def forward(ctx, local, partition, group, reduce_scatter, method):
        ctx.partition, ctx.group, ctx.reduce_scatter = partition, group, reduce_scatter
        return _gather(local, partition, group, method)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        import torch.distributed as dist

        p = ctx.partition
        if not ctx.reduce_scatter:
            return p.split(dy.contiguous()), None, None, None, None
        dx = dy.new_empty((p.local_rows, *dy.shape[1:]))
        dist.reduce_scatter_tensor(dx, p.to_rank_order(dy.contiguous()), group=ctx.group)
        return dx, None, None, None, None

# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp's per-batch plans (private): one C++ partition (and padding, for raw
boundaries) per batch with what the ops derive from it (sizes, index tensors per device, device
copies of the boundaries for ``headroom._cuda``'s launches), found again by the ops from the
``cu_seqlens`` tensor they are given; the input checks and what every CUDA launch takes. The
public surface is :mod:`headroom.torch.cp`."""
from __future__ import annotations

import contextlib
import math
import weakref
from typing import Optional

import torch

from headroom import invalid_argument

from headroom._core import cp as _host  # the C++ partition, padding and index plans

try:
    from headroom import _cuda
except ImportError:  # built without nvcc: CPU tensors only
    _cuda = None

_LAYOUTS = ("dual_chunk", "contiguous")
_INDEX_DTYPES = (torch.int32, torch.int64)


# ---- plans: one per batch, found again by the ops from the cu_seqlens tensor they are given ---------


def _host_cu(cu_seqlens, what: str) -> torch.Tensor:
    """cu_seqlens (tensor, list, tuple) as a 1-D int64 CPU tensor; the values are checked in C++."""
    if isinstance(cu_seqlens, torch.Tensor):
        if cu_seqlens.dtype not in _INDEX_DTYPES:
            raise invalid_argument(f"{what}: cu_seqlens has dtype {cu_seqlens.dtype}, expected torch.int32 or torch.int64")
        if cu_seqlens.dim() != 1:
            raise invalid_argument(f"{what}: cu_seqlens has shape {tuple(cu_seqlens.shape)}, expected one dimension")
        # A copy: the partition keeps its own boundaries whatever the caller does to theirs.
        return cu_seqlens.detach().to(device="cpu", dtype=torch.int64, copy=True).contiguous()
    try:
        return torch.tensor(list(cu_seqlens), dtype=torch.int64)
    except (TypeError, ValueError, RuntimeError) as e:
        raise invalid_argument(f"{what}: cu_seqlens = {cu_seqlens!r}, expected a 1-D sequence of ints") from e


def _checked_layout(layout: str, what: str) -> str:
    if layout not in _LAYOUTS:
        raise invalid_argument(f"{what}: layout = {layout!r}, expected 'dual_chunk' or 'contiguous'")
    return layout


class _Entry:
    """One batch's C++ partition (and padding, for raw boundaries) with what the ops derive from
    it: sizes as ints, index plans as tensors per device, and device copies of the boundaries the
    kernels read (``cu``, ``raw_cu``: headroom._cuda's (pointer, entries, bytes per entry))."""

    __slots__ = ("host_cu", "args", "partition", "padding", "version", "global_rows", "local_rows", "raw_rows",
                 "indices", "index_streams", "cu", "raw_cu", "device", "device_index", "device_cu", "streams")

    def __init__(self, host_cu: list, version: int, cp_size: int, cp_rank: int, layout: str, raw=None):
        """raw = (tp, extra, total_multiple): host_cu are raw boundaries, padded here."""
        self.host_cu, self.args, self.version = host_cu, (cp_size, cp_rank, layout, raw), version
        if raw is None:
            self.padding = None
            self.partition = _host.Partition(host_cu, cp_size, cp_rank, layout)
        else:
            tp, extra, total_multiple = raw
            self.padding = _host.Padding(host_cu, _host.alignment_for(layout, cp_size, tp, extra), total_multiple)
            self.partition = _host.Partition(self.padding.padded_cu_seqlens, cp_size, cp_rank, layout)
        self.global_rows = self.partition.global_rows
        self.local_rows = self.partition.local_rows
        self.raw_rows = self.padding.raw_rows if raw is not None else -1
        self.indices = {}
        self.index_streams = {}  # CUDA index tensors: the raw streams they were made or recorded on
        self.cu = self.raw_cu = self.device = self.device_cu = None
        self.device_index = -2  # no device bound (CPU tensors report -1)
        self.streams = set()  # raw streams kernels reading device_cu were launched on

    def index(self, name: str, device: torch.device, shift: int = 0):
        """An index tensor of the plan on `device`: "local", "gather", "pad_split" (raw row or -1
        per local row) or "pad_split_pairs" (local rows with a raw source, and those raw rows)."""
        key = (name, shift, device)
        t = self.indices.get(key)
        if t is None:
            if name == "local":
                t = torch.from_numpy(self.partition.local_index()).to(device)
            elif name == "gather":
                t = torch.from_numpy(self.partition.gather_index()).to(device)
            else:
                t = self.pad_split_index(shift)
                if name == "pad_split_pairs":
                    rows = torch.nonzero(t >= 0).flatten()
                    t = (rows.to(device), t[rows].to(device))
                else:
                    t = t.to(device)
            self.indices[key] = t
            if device.type == "cuda":
                self.index_streams[key] = {torch.cuda.current_stream(device).cuda_stream}
        elif device.type == "cuda":  # read on another stream than its own: recorded there too
            _record_on_stream(t if isinstance(t, tuple) else (t,), self.index_streams[key], device)
        return t

    def pad_split_index(self, shift: int) -> torch.Tensor:
        """The raw row each local row reads, -1 for a pad; shift 1: the next token of the same
        sequence (the label), -1 past its last real token (where the loss mask is 0)."""
        if shift == 0:
            return torch.from_numpy(_host.pad_split_index(self.padding, self.partition))
        labels, mask = _host.shifted_labels(self.padding, self.partition, None, None, -1)
        return torch.from_numpy(labels).masked_fill_(torch.from_numpy(mask) == 0, -1)

    def bind(self, device: torch.device) -> None:
        """Device copies of the boundaries (kept alive here) on `device`, for headroom._cuda."""
        global _one_device
        if device != self.device:
            if _cuda is None:
                raise ImportError("headroom.torch.cp: CUDA tensors need headroom._cuda; reinstall headroom with the "
                                  "CUDA toolkit (nvcc) present")
            padded = torch.tensor(self.partition.global_cu_seqlens, dtype=torch.int64).to(device)
            raw_cu = None
            if self.padding is not None:  # the caller's raw boundaries (no entry for a dummy sequence)
                raw_cu = torch.tensor(self.host_cu, dtype=torch.int64).to(device)
                self.raw_cu = (raw_cu.data_ptr(), raw_cu.numel(), 8)
            self.cu = (padded.data_ptr(), padded.numel(), 8)
            self.device, self.device_cu = device, (padded, raw_cu)
            # Allocated on (and ordered with) the current stream; launches on others are recorded.
            self.streams = {_raw_stream(padded.get_device())}
            self.device_index = padded.get_device()
            _one_device = torch.cuda.device_count() == 1


# (id(cu_seqlens), plan key) -> (weak reference to the tensor, _Entry). A Partition registers its
# plans here, so the ops find them by the tensor they are given without rebuilding; a tensor the
# ops have not seen (a copy made by opcheck or by a compiled graph), or one changed in place since,
# gets its plan built once from its values. Entries leave with their tensor.
_plans: dict = {}


def _forget(key):
    return lambda _ref: _plans.pop(key, None)


def _register(cu: torch.Tensor, key: tuple, entry: _Entry) -> _Entry:
    k = (id(cu),) + key
    _plans[k] = (weakref.ref(cu, _forget(k)), entry)
    return entry


def _registered(cu: torch.Tensor, key: tuple) -> Optional[_Entry]:
    """The plan registered for cu and key, if current (no torch op: safe under any mode)."""
    hit = _plans.get((id(cu),) + key)
    if hit is not None and hit[0]() is cu and hit[1].version == cu._version:
        return hit[1]
    return None


def _lookup(cu: torch.Tensor, cp_size: int, cp_rank: int, layout: str, raw, what: str) -> _Entry:
    key = (cp_size, cp_rank, layout, raw)
    hit = _registered(cu, key)
    if hit is not None:
        return hit
    entry = _Entry(_host_cu(cu, what).tolist(), cu._version, cp_size, cp_rank, _checked_layout(layout, what), raw)
    return _register(cu, key, entry)


# ---- input checks (before anything runs) -------------------------------------------------------------


def _check_rows(x: torch.Tensor, rows: int, what: str, name: str, expected: str) -> torch.Size:
    """x's shape, once checked (the implementations size their output from it)."""
    # One cheap test for the common case (every op runs it per call); the messages only on failure.
    shape = x.shape
    if shape and shape[0] == rows and x.is_contiguous() and (x.is_cuda or x.is_cpu):
        return shape
    if x.dim() < 1:
        raise invalid_argument(f"{what}: {name} is a 0-d tensor, expected [rows, ...] with {rows} rows ({expected})")
    if x.shape[0] != rows:
        raise invalid_argument(f"{what}: {name} has {x.shape[0]} rows (shape {tuple(x.shape)}), expected {rows} ({expected})")
    if not x.is_contiguous():
        raise invalid_argument(f"{what}: {name} of shape {tuple(x.shape)} has strides {x.stride()}, expected a "
                               "contiguous tensor (call .contiguous() first)")
    raise invalid_argument(f"{what}: {name} is on device {x.device}, expected a CPU or CUDA tensor")


def _width(x: torch.Tensor) -> int:
    """Elements per row (dimension 0 is rows)."""
    return x.numel() // x.shape[0] if x.shape[0] else math.prod(x.shape[1:])


# The private getters are a C call each; torch.cuda's public ones build Python objects per call.
_current_device = getattr(torch._C, "_cuda_getDevice", None) or (lambda: torch.cuda.current_device())
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)


# Whether the process sees one CUDA device, set at the first bind (the count is fixed once CUDA is
# up): then every tensor is on the current device and the launch skips asking which one that is.
_one_device = False


def _launch_args(entry: _Entry, x: torch.Tensor, rows: int, out: torch.Tensor, out_rows: int) -> Optional[tuple]:
    """What a headroom._cuda launch on x's device and that device's current stream takes after its
    partition and device boundaries: (input, input_rows, output, output_rows, width, elem_bytes,
    stream), with entry's boundaries copied to that device first (entry.cu, entry.raw_cu); None
    when no element moves. x has `rows` rows (checked), out `out_rows`."""
    elements = x.numel()
    if elements == 0 and out.numel() == 0:
        return None
    device = x.get_device()
    if entry.device_index != device:
        entry.bind(x.device)
    stream = _raw_stream(device)
    if stream not in entry.streams:
        _record_on_stream(entry.device_cu, entry.streams, device)
    width = elements // rows if rows else _width(x)
    return x.data_ptr(), rows, out.data_ptr(), out_rows, width, x.element_size(), stream


_CURRENT = contextlib.nullcontext()


def _on_device(x: torch.Tensor):
    """Where a launch on x runs: x's device, made current for the call when it is not."""
    if _one_device:
        return _CURRENT
    device = x.get_device()
    return _CURRENT if device == _current_device() else torch.cuda.device(device)


def _record_on_stream(tensors, streams: set, device) -> None:
    """Kernels on the current stream of `device` read `tensors` (device boundaries, index plans),
    which were allocated on another: without record_stream, dropping the plan would hand their
    memory back to the caching allocator for reuse on the allocation stream while a kernel on this
    one may still read it. `streams`: the raw streams already recorded, this one added."""
    current = torch.cuda.current_stream(device)
    if current.cuda_stream in streams:
        return
    for t in tensors:
        if t is not None:
            t.record_stream(current)
    streams.add(current.cuda_stream)

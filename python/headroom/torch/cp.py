"""Context-parallel split / gather of packed (THD, ``cu_seqlens``) batches as torch custom ops.

Every op is in the ``headroom`` namespace with a fake implementation (``torch.compile`` traces
through it with no graph break) and an autograd formula through its adjoint: the split and reorder
ops registered from C++ by ``headroom._torch_ops`` (LibTorch stable ABI) when the package was built
with torch, else ``torch.library.custom_op``s defined here. On CUDA tensors the ops launch headroom's kernels (``headroom._cuda``: no
index tensor in memory, on the current stream); on CPU they are torch index ops driven by the
same C++ index plan, so ``torch.library.opcheck`` runs on CPU-only machines.

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
import math
import weakref
from typing import Callable, NamedTuple, Optional, Union

import torch

import headroom
from headroom import invalid_argument

from headroom._core import cp as _host  # the C++ partition, padding and index plans

try:
    from headroom import _cuda
except ImportError:  # built without nvcc: CPU tensors only
    _cuda = None

try:  # the split and reorder ops on the dispatcher from C++ (LibTorch stable ABI), when built with torch
    from headroom import _torch_ops
except ImportError:  # built without torch: the Python custom ops below
    _torch_ops = None

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
    it: sizes as ints, index plans as tensors per device, and the CUDA plan with device copies
    of the boundaries its kernels read."""

    __slots__ = ("host_cu", "args", "partition", "padding", "version", "global_rows", "local_rows", "raw_rows",
                 "indices", "cuda_plan", "device", "device_index", "device_cu", "streams")

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
        self.cuda_plan = self.device = self.device_cu = None
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
        return t

    def pad_split_index(self, shift: int) -> torch.Tensor:
        """The raw row each local row reads, -1 for a pad; shift 1: the next token of the same
        sequence (the label), -1 past its last real token (where the loss mask is 0)."""
        if shift == 0:
            return torch.from_numpy(_host.pad_split_index(self.padding, self.partition))
        labels, mask = _host.shifted_labels(self.padding, self.partition, None, None, -1)
        return torch.from_numpy(labels).masked_fill_(torch.from_numpy(mask) == 0, -1)

    def bind(self, device: torch.device):
        """The CUDA plan, with device copies of the boundaries (kept alive here) on `device`."""
        global _one_device
        if device != self.device:
            if _cuda is None:
                raise ImportError("headroom.torch.cp: CUDA tensors need headroom._cuda; reinstall headroom with the "
                                  "CUDA toolkit (nvcc) present")
            if self.cuda_plan is None:
                cp_size, cp_rank, layout, raw = self.args
                self.cuda_plan = (_cuda.Plan(self.host_cu, cp_size, cp_rank, layout) if raw is None
                                  else _cuda.Plan.from_raw(self.host_cu, cp_size, cp_rank, layout, *raw))
            padded = torch.tensor(self.partition.global_cu_seqlens, dtype=torch.int64).to(device)
            raw_cu = None
            if self.padding is not None:
                raw_cu = torch.tensor(self.host_cu, dtype=torch.int64).to(device)
                self.cuda_plan.set_device_raw_cu(raw_cu.data_ptr(), raw_cu.numel(), 8)
            self.cuda_plan.set_device_cu(padded.data_ptr(), padded.numel(), 8)
            self.device, self.device_cu = device, (padded, raw_cu)
            # Allocated on (and ordered with) the current stream; launches on others are recorded.
            self.streams = {_raw_stream(padded.get_device())}
            self.device_index = padded.get_device()
            _one_device = torch.cuda.device_count() == 1
        return self.cuda_plan


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


def _launch(entry: _Entry, method: str, x: torch.Tensor, rows: int, out: torch.Tensor, out_rows: int,
            extra: tuple = ()) -> torch.Tensor:
    """One kernel launch on x's device and that device's current stream; x has `rows` rows (checked),
    out `out_rows`."""
    elements = x.numel()
    if elements == 0 and out.numel() == 0:
        return out
    device = x.get_device()
    plan = entry.cuda_plan if entry.device_index == device else entry.bind(x.device)
    width = elements // rows if rows else _width(x)
    stream = _raw_stream(device)
    if stream not in entry.streams:
        _record_on_stream(entry, device)
    if not _one_device and device != _current_device():
        with torch.cuda.device(device):
            getattr(plan, method)(x.data_ptr(), rows, out.data_ptr(), out_rows, width, x.element_size(), *extra,
                                  stream)
        return out
    getattr(plan, method)(x.data_ptr(), rows, out.data_ptr(), out_rows, width, x.element_size(), *extra, stream)
    return out


def _record_on_stream(entry: _Entry, device: int) -> None:
    """The kernels read the device boundaries on a stream other than the one they were allocated
    on: without record_stream, dropping the plan would hand their memory back to the caching
    allocator for reuse on the allocation stream while a kernel on this one may still read it."""
    current = torch.cuda.current_stream(device)
    for t in entry.device_cu:
        if t is not None:
            t.record_stream(current)
    entry.streams.add(current.cuda_stream)


# ---- implementations (what the ops run; the eager path calls them directly) ---------------------------

_SPLIT = "headroom.torch.cp.split"
_SPLIT_ADJ = "headroom.torch.cp.split_adjoint"
_TO_SEQ = "headroom.torch.cp.to_sequence_order"
_TO_RANK = "headroom.torch.cp.to_rank_order"
_PAD_SPLIT = "headroom.torch.cp.pad_split"
_PAD_SPLIT_ADJ = "headroom.torch.cp.pad_split_adjoint"


# `entry`: the plan, when the caller (a Partition, on the eager path) holds it current; the ops
# find it from cu_seqlens. Outputs are sized from the checked shape, the sizes as separate
# arguments: torch parses a shape tuple ~0.5 us slower per call.


def _split_impl(x, cu_seqlens, cp_size, cp_rank, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, cp_rank, layout, None, _SPLIT)
    shape = _check_rows(x, e.global_rows, _SPLIT, "input", "cu_seqlens[-1], the padded total")
    if x.is_cpu:
        return x.index_select(0, e.index("local", x.device))
    return _launch(e, "split", x, e.global_rows, x.new_empty(e.local_rows, *shape[1:]), e.local_rows)


def _split_adjoint_impl(y, cu_seqlens, cp_size, cp_rank, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, cp_rank, layout, None, _SPLIT_ADJ)
    shape = _check_rows(y, e.local_rows, _SPLIT_ADJ, "input", "this rank's rows, cu_seqlens[-1] / cp_size")
    if y.is_cpu:
        return y.new_zeros(e.global_rows, *shape[1:]).index_copy_(0, e.index("local", y.device), y)
    return _launch(e, "split_adjoint", y, e.local_rows, y.new_empty(e.global_rows, *shape[1:]), e.global_rows)


def _to_sequence_order_impl(x, cu_seqlens, cp_size, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, 0, layout, None, _TO_SEQ)
    _check_rows(x, e.global_rows, _TO_SEQ, "rank-major input", "cu_seqlens[-1], every rank's rows")
    if x.is_cpu:
        return x.index_select(0, e.index("gather", x.device))
    return _launch(e, "to_sequence_order", x, e.global_rows, torch.empty_like(x), e.global_rows)


def _to_rank_order_impl(x, cu_seqlens, cp_size, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, 0, layout, None, _TO_RANK)
    _check_rows(x, e.global_rows, _TO_RANK, "sequence-order input", "cu_seqlens[-1]")
    if x.is_cpu:
        return torch.empty_like(x).index_copy_(0, e.index("gather", x.device), x)
    return _launch(e, "to_rank_order", x, e.global_rows, torch.empty_like(x), e.global_rows)


def _element_bytes(value: torch.Tensor) -> bytes:
    """The bytes of a 0-d tensor's element (any dtype, bfloat16 included), as the kernel's fill."""
    return bytes(value.reshape(1).view(torch.uint8).tolist())


# (pad value, dtype) -> the fill's bytes: building them costs a tensor and a copy, every call the same.
_fill_bytes: dict = {}


def _fill(pad_value: float, dtype: torch.dtype) -> bytes:
    key = (pad_value, dtype)
    fill = _fill_bytes.get(key)
    if fill is None:
        fill = _element_bytes(torch.tensor(pad_value, dtype=dtype))
        if len(_fill_bytes) < 256:
            _fill_bytes[key] = fill
    return fill


def _pad_split_impl(raw, raw_cu_seqlens, cp_size, cp_rank, layout, tp, extra, total_multiple, pad_value, shift,
                    entry=None):
    e = entry or _lookup(raw_cu_seqlens, cp_size, cp_rank, layout, (tp, extra, total_multiple), _PAD_SPLIT)
    shape = _check_rows(raw, e.raw_rows, _PAD_SPLIT, "raw input", "raw_cu_seqlens[-1]")
    if shift != 0 and shift != 1:
        raise invalid_argument(f"{_PAD_SPLIT}: shift = {shift}, expected 0 (the rows) or 1 (next-token labels)")
    if raw.is_cpu:
        pad = torch.tensor(pad_value, dtype=raw.dtype)
        idx = e.index("pad_split", raw.device, shift)
        if raw.shape[0] == 0:
            return pad.expand((e.local_rows, *raw.shape[1:])).clone()
        out = raw.index_select(0, idx.clamp(min=0))
        out[idx < 0] = pad
        return out
    return _launch(e, "pad_split", raw, e.raw_rows, raw.new_empty(e.local_rows, *shape[1:]), e.local_rows,
                   (_fill(pad_value, raw.dtype), shift))


def _pad_split_adjoint_impl(grad, raw_cu_seqlens, raw_rows, cp_size, cp_rank, layout, tp, extra, total_multiple,
                            shift):
    e = _lookup(raw_cu_seqlens, cp_size, cp_rank, layout, (tp, extra, total_multiple), _PAD_SPLIT_ADJ)
    _check_rows(grad, e.local_rows, _PAD_SPLIT_ADJ, "gradient", "this rank's padded rows")
    if raw_rows != e.raw_rows:
        raise invalid_argument(f"{_PAD_SPLIT_ADJ}: raw_rows = {raw_rows}, expected {e.raw_rows} (raw_cu_seqlens[-1])")
    local, raw = e.index("pad_split_pairs", grad.device, shift)
    return grad.new_zeros((raw_rows, *grad.shape[1:])).index_copy_(0, raw, grad.index_select(0, local))


# ---- the custom ops: schema, implementation, fake (shapes only), autograd through the adjoints --------

# Registered in C++ by headroom._torch_ops when it is built (same schemas); their fake kernels and
# autograd are registered here either way (the stable ABI registers no autograd).
_CPP_OPS = ("cp_split", "cp_split_adjoint", "cp_to_sequence_order", "cp_to_rank_order")


def _op(name):
    def define(fn):
        if _torch_ops is not None and name in _CPP_OPS:
            return getattr(torch.ops.headroom, name).default
        return torch.library.custom_op(f"headroom::{name}", mutates_args=())(fn)
    return define


def _fake(name):
    return torch.library.register_fake(f"headroom::{name}")


@_op("cp_split")
def _split_op(x: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int, cp_rank: int, layout: str) -> torch.Tensor:
    return _split_impl(x, cu_seqlens, cp_size, cp_rank, layout)


@_op("cp_split_adjoint")
def _split_adjoint_op(y: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int, cp_rank: int,
                      layout: str) -> torch.Tensor:
    return _split_adjoint_impl(y, cu_seqlens, cp_size, cp_rank, layout)


@_op("cp_to_sequence_order")
def _to_sequence_order_op(x: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int, layout: str) -> torch.Tensor:
    return _to_sequence_order_impl(x, cu_seqlens, cp_size, layout)


@_op("cp_to_rank_order")
def _to_rank_order_op(x: torch.Tensor, cu_seqlens: torch.Tensor, cp_size: int, layout: str) -> torch.Tensor:
    return _to_rank_order_impl(x, cu_seqlens, cp_size, layout)


@_op("cp_pad_split")
def _pad_split_op(raw: torch.Tensor, raw_cu_seqlens: torch.Tensor, cp_size: int, cp_rank: int, layout: str,
                  tp: int, extra: int, total_multiple: int, pad_value: float, shift: int) -> torch.Tensor:
    return _pad_split_impl(raw, raw_cu_seqlens, cp_size, cp_rank, layout, tp, extra, total_multiple, pad_value, shift)


@_op("cp_pad_split_adjoint")
def _pad_split_adjoint_op(grad: torch.Tensor, raw_cu_seqlens: torch.Tensor, raw_rows: int, cp_size: int, cp_rank: int,
                          layout: str, tp: int, extra: int, total_multiple: int, shift: int) -> torch.Tensor:
    return _pad_split_adjoint_impl(grad, raw_cu_seqlens, raw_rows, cp_size, cp_rank, layout, tp, extra,
                                   total_multiple, shift)


@_fake("cp_split")
def _(x, cu_seqlens, cp_size, cp_rank, layout):
    return x.new_empty((x.shape[0] // cp_size, *x.shape[1:]))


@_fake("cp_split_adjoint")
def _(y, cu_seqlens, cp_size, cp_rank, layout):
    return y.new_empty((y.shape[0] * cp_size, *y.shape[1:]))


@_fake("cp_to_sequence_order")
def _(x, cu_seqlens, cp_size, layout):
    return torch.empty_like(x)


@_fake("cp_to_rank_order")
def _(x, cu_seqlens, cp_size, layout):
    return torch.empty_like(x)


@_fake("cp_pad_split")
def _(raw, raw_cu_seqlens, cp_size, cp_rank, layout, tp, extra, total_multiple, pad_value, shift):
    # The padded total depends on the boundaries' values: a data-dependent size.
    rows = torch.library.get_ctx().new_dynamic_size()
    return raw.new_empty((rows, *raw.shape[1:]))


@_fake("cp_pad_split_adjoint")
def _(grad, raw_cu_seqlens, raw_rows, cp_size, cp_rank, layout, tp, extra, total_multiple, shift):
    return grad.new_empty((raw_rows, *grad.shape[1:]))


# Backward formulas, shared by the ops' autograd and the eager path. `args` are the op's
# arguments after the tensor; each returns the input's gradient.


def _split_grad(g, args):
    return _split_adjoint_op(g.contiguous(), *args)


def _split_adjoint_grad(g, args):
    return _split_op(g.contiguous(), *args)


def _to_sequence_order_grad(g, args):
    return _to_rank_order_op(g.contiguous(), *args)


def _to_rank_order_grad(g, args):
    return _to_sequence_order_op(g.contiguous(), *args)


def _pad_split_grad(g, args, raw_rows):
    raw_cu, cp_size, cp_rank, layout, tp, extra, total_multiple, _pad, shift = args
    return _pad_split_adjoint_op(g.contiguous(), raw_cu, raw_rows, cp_size, cp_rank, layout, tp, extra,
                                 total_multiple, shift)


def _pad_split_adjoint_grad(g, args):
    raw_cu, _raw_rows, cp_size, cp_rank, layout, tp, extra, total_multiple, shift = args
    return _pad_split_op(g.contiguous(), raw_cu, cp_size, cp_rank, layout, tp, extra, total_multiple, 0.0, shift)


def _register_autograd(name, grad_fn, nargs):
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[1])
        ctx.rest = inputs[2:]
        ctx.raw_rows = inputs[0].shape[0]

    def backward(ctx, g):
        (cu,) = ctx.saved_tensors
        args = (cu, *ctx.rest)
        dx = grad_fn(g, args, ctx.raw_rows) if grad_fn is _pad_split_grad else grad_fn(g, args)
        return (dx,) + (None,) * (nargs - 1)

    torch.library.register_autograd(f"headroom::{name}", backward, setup_context=setup_context)


_register_autograd("cp_split", _split_grad, 5)
_register_autograd("cp_split_adjoint", _split_adjoint_grad, 5)
_register_autograd("cp_to_sequence_order", _to_sequence_order_grad, 4)
_register_autograd("cp_to_rank_order", _to_rank_order_grad, 4)
_register_autograd("cp_pad_split", _pad_split_grad, 10)
_register_autograd("cp_pad_split_adjoint", _pad_split_adjoint_grad, 10)


# ---- eager path: the dispatcher adds ~10 us a call in Python; with nothing that needs it (no
# torch.compile, no dispatch or function mode, no functorch transform, a plain tensor) the
# Partition methods call the implementation directly, through the same backward formulas. ------------


class _Eager(torch.autograd.Function):
    """The eager path's autograd node: one non-tensor argument (impl, grad formula, op arguments,
    plan); it keeps only the grad formula, the op arguments and the input's row count."""

    @staticmethod
    def forward(ctx, x, call):
        impl, grad, args, entry = call
        # Not the plan: the graph keeps what it holds alive. The row count only where the formula
        # takes it (reading x.shape costs every other op a little).
        ctx.call = (grad, args, x.shape[0]) if grad is _pad_split_grad else (grad, args)
        return impl(x, *args, entry)

    @staticmethod
    def backward(ctx, g):
        grad, *rest = ctx.call
        return grad(g, *rest), None


# Function.apply in Python (torch <= 2.14) binds default arguments and walks the arguments for
# functorch's dead wrappers before the C++ apply; the eager path runs only outside every functorch
# transform, where that walk finds nothing, so it calls the C++ apply directly.
try:
    _eager_apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _Eager)
except (AttributeError, KeyError, TypeError):
    _eager_apply = _Eager.apply


# The innermost functorch transform's level (vmap, grad, ...), None outside any.
_functorch_level = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", lambda: None)
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_grad_enabled = torch.is_grad_enabled


def _call(op, impl, grad, x, entry, args):
    # Eager only with nothing that needs the dispatcher (see above); tested inline, every call runs it.
    # `args`: the op's arguments after x, a tuple the Partition builds once.
    if not (type(x) is torch.Tensor and (x.is_cuda or x.is_cpu) and not _is_compiling()
            and _dispatch_modes() == 0 and not _function_modes() and _functorch_level() is None):
        return op(x, *args)
    if entry is not None and entry.version != args[0]._version:
        entry = None  # cu_seqlens changed in place since: the lookup rebuilds the plan
    if x.requires_grad and _grad_enabled():
        return _eager_apply(x, (impl, grad, args, entry))
    return impl(x, *args, entry)


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
        if fast:
            return _launch(partition._rank0() or e, "to_sequence_order", rank_major, e.global_rows, out, e.global_rows)
        return partition.to_sequence_order(rank_major)
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
        _launch(e, "place", local, rows, out, e.global_rows, (rank, 0, rows, True))  # own rows, beside the messages
        for w in works:
            w.wait()
        return out
    # pipelined: the all-gather into a rank-major workspace; own rows placed from `local` meanwhile
    workspace = local.new_empty(out.shape)
    work = dist.all_gather_into_tensor(workspace, local, group=group, async_op=True)
    _launch(e, "place", local, rows, out, e.global_rows, (rank, 0, rows, True))
    work.wait()  # the current stream waits for the all-gather; the host does not
    if rank > 0:
        _launch(e, "place", workspace[:rank * rows], rank * rows, out, e.global_rows, (0, 0, rows, True))
    if rank + 1 < cp_size:
        _launch(e, "place", workspace[(rank + 1) * rows:], (cp_size - 1 - rank) * rows, out, e.global_rows,
                (rank + 1, 0, rows, True))
    return out


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

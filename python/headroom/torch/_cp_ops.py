# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp's ops machinery (private): the implementations (torch index ops on CPU, one
headroom._cuda launch on CUDA), the ``headroom::cp_*`` custom ops with their fake kernels and
autograd through the adjoints, and the eager path that skips the dispatcher when nothing needs it.
The public surface is :mod:`headroom.torch.cp`; the op names are part of it (traced graphs hold
them)."""
from __future__ import annotations

import torch

from headroom import invalid_argument, logic_error

from ._cp_plans import _check_rows, _cuda, _launch_args, _lookup, _on_device

try:  # the split and reorder ops on the dispatcher from C++ (LibTorch stable ABI), when built with torch
    from headroom import _torch_ops
except ImportError:  # built without torch: the Python custom ops below
    _torch_ops = None


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
    out = x.new_empty(e.local_rows, *shape[1:])
    if a := _launch_args(e, x, e.global_rows, out, e.local_rows):
        with _on_device(x):
            _cuda.split(e.partition, e.cu, *a)
    return out


def _split_adjoint_impl(y, cu_seqlens, cp_size, cp_rank, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, cp_rank, layout, None, _SPLIT_ADJ)
    shape = _check_rows(y, e.local_rows, _SPLIT_ADJ, "input", "this rank's rows, cu_seqlens[-1] / cp_size")
    if y.is_cpu:
        return y.new_zeros(e.global_rows, *shape[1:]).index_copy_(0, e.index("local", y.device), y)
    out = y.new_empty(e.global_rows, *shape[1:])
    if a := _launch_args(e, y, e.local_rows, out, e.global_rows):
        with _on_device(y):
            _cuda.split_adjoint(e.partition, e.cu, *a)
    return out


def _to_sequence_order_impl(x, cu_seqlens, cp_size, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, 0, layout, None, _TO_SEQ)
    _check_rows(x, e.global_rows, _TO_SEQ, "rank-major input", "cu_seqlens[-1], every rank's rows")
    if x.is_cpu:
        return x.index_select(0, e.index("gather", x.device))
    out = torch.empty_like(x)
    if a := _launch_args(e, x, e.global_rows, out, e.global_rows):
        with _on_device(x):
            _cuda.to_sequence_order(e.partition, e.cu, *a)
    return out


def _to_rank_order_impl(x, cu_seqlens, cp_size, layout, entry=None):
    e = entry or _lookup(cu_seqlens, cp_size, 0, layout, None, _TO_RANK)
    _check_rows(x, e.global_rows, _TO_RANK, "sequence-order input", "cu_seqlens[-1]")
    if x.is_cpu:
        return torch.empty_like(x).index_copy_(0, e.index("gather", x.device), x)
    out = torch.empty_like(x)
    if a := _launch_args(e, x, e.global_rows, out, e.global_rows):
        with _on_device(x):
            _cuda.to_rank_order(e.partition, e.cu, *a)
    return out


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
    out = raw.new_empty(e.local_rows, *shape[1:])
    if a := _launch_args(e, raw, e.raw_rows, out, e.local_rows):
        with _on_device(raw):
            _cuda.pad_split(e.padding, e.partition, e.raw_cu, e.cu, *a, _fill(pad_value, raw.dtype), shift)
    return out


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


# The C++ ops (when headroom._torch_ops is built) get a leaner autograd kernel, below _Eager.
_GRADS = {"cp_split": _split_grad, "cp_split_adjoint": _split_adjoint_grad,
          "cp_to_sequence_order": _to_sequence_order_grad, "cp_to_rank_order": _to_rank_order_grad}
if _torch_ops is None:
    for _name, _grad in _GRADS.items():
        _register_autograd(_name, _grad, 5 if "split" in _name else 4)
_register_autograd("cp_pad_split", _pad_split_grad, 10)
_register_autograd("cp_pad_split_adjoint", _pad_split_adjoint_grad, 10)


# ---- eager path: the dispatcher adds ~10 us a call in Python; with nothing that needs it (no
# torch.compile, no dispatch or function mode, no functorch transform, a plain tensor) the
# Partition methods call the implementation directly, through the same backward formulas. ------------


class _Eager(torch.autograd.Function):
    """The autograd node of the eager path and of the C++ ops: one non-tensor argument (impl, grad
    formula, op arguments, plan or keyset); it keeps only the grad formula, the op arguments, the
    boundaries' version and the input's row count."""

    @staticmethod
    def forward(ctx, x, call):
        impl, grad, args, entry = call
        # Not the plan: the graph keeps what it holds alive. The row count only where the formula
        # takes it (reading x.shape costs every other op a little). The boundaries' version, as
        # save_for_backward would check it: changed in place, they would give another gradient.
        ctx.call = ((grad, args, args[0]._version, x.shape[0]) if grad is _pad_split_grad
                    else (grad, args, args[0]._version))
        return impl(x, *args, entry)

    @staticmethod
    def backward(ctx, g):
        grad, args, version, *rows = ctx.call
        if args[0]._version != version:
            raise logic_error(f"headroom.torch.cp: the boundaries (cu_seqlens) were modified in place after the "
                              f"forward (version {args[0]._version}, expected {version}), so the backward would "
                              f"use other ones; change a copy")
        return grad(g, args, *rows), None


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


# ---- autograd of the C++ ops: a Python kernel at the Autograd key (the stable ABI registers none) ----
# torch.library.register_autograd registers a generic one (torch/_library/autograd.py): with no
# input that needs grad it enters _AutoDispatchBelowAutograd and redispatches through the
# OpOverload; with one, its Function.apply in Python (default binding, functorch's wrapper walk)
# runs a forward that fills the schema's defaults and calls setup_context. These ops have one
# differentiable input (cu_seqlens is an integer tensor) and no defaults: without grad the kernel
# redispatches below autograd straight away (the TLS guard is not needed: nothing nested records a
# graph without an input that needs grad); with grad it builds the eager path's node, whose
# forward redispatches, through the C++ apply outside functorch transforms as the eager path does.

_after_autograd = torch._C._after_autograd_keyset
_autograd_lib = torch.library.Library("headroom", "IMPL") if _torch_ops is not None else None


def _register_cpp_autograd(name, grad):
    redispatch = getattr(torch.ops.headroom, name).default._handle.redispatch_boxed

    def below(x, *rest):  # _Eager's implementation: the op's arguments after x, then the keyset
        return redispatch(rest[-1], x, *rest[:-1])

    def kernel(keyset, x, *args):
        keyset = keyset & _after_autograd
        if x.requires_grad and _grad_enabled():
            apply = _eager_apply if _functorch_level() is None else _Eager.apply
            return apply(x, (below, grad, args, keyset))
        return redispatch(keyset, x, *args)

    _autograd_lib.impl(name, kernel, "Autograd", with_keyset=True)


if _torch_ops is not None:
    for _name, _grad in _GRADS.items():
        _register_cpp_autograd(_name, _grad)

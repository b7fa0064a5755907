# SPDX-License-Identifier: Apache-2.0
"""headroom._torch_ops (the CP split and reorder ops registered from C++ on the LibTorch stable ABI)
on CPU: they are the ops headroom.torch.cp uses, registered from ops.cpp; opcheck (schema, fake,
autograd registered from Python) at every element size; bytes equal to the Python implementation
(torch index ops) on random packed batches of both layouts; bad input. Skipped when the package was
built without torch (then headroom.torch.cp defines these ops in Python, tested by test_cp_ops.py)."""
import random
import re

import pytest
import torch

from headroom.torch import _cp_ops, cp

from _cp_cases import DTYPES, random_padded_cu, random_tensor

pytest.importorskip("headroom._torch_ops", reason="headroom was built without torch: no C++ ops")

ops = torch.ops.headroom
NAMES = ("cp_split", "cp_split_adjoint", "cp_to_sequence_order", "cp_to_rank_order")


@pytest.mark.parametrize("name", NAMES)
def test_the_ops_are_registered_from_cpp(name):
    dump = torch._C._dispatch_dump(f"headroom::{name}")
    # Schema and the CPU kernel from ops.cpp; the fake kernel and autograd from headroom.torch._cp_ops:
    # its own autograd kernel, not torch.library.register_autograd's generic one (registered from
    # torch/library.py, slower a call: bench/cp_torch_ops.py).
    assert "ops.cpp" in dump and "CPU" in dump, dump
    assert re.search(r"^Autograd\[alias\]: registered at \S*_cp_ops\.py:", dump, re.M), dump
    assert _cp_ops._CPP_OPS == NAMES


def _cases(dtype):
    p = cp.Partition([0, 8, 8, 24, 40], 4, 1)
    T, n = p.global_rows, p.local_rows
    gen = torch.Generator().manual_seed(3)
    x, y = random_tensor((T, 3), dtype, gen), random_tensor((n, 3), dtype, gen)
    return [(ops.cp_split.default, (x, p.cu_seqlens, 4, 1, "dual_chunk")),
            (ops.cp_split.default, (x, p.cu_seqlens, 4, 3, "contiguous")),
            (ops.cp_split_adjoint.default, (y, p.cu_seqlens, 4, 1, "dual_chunk")),
            (ops.cp_to_sequence_order.default, (x, p.cu_seqlens, 4, "dual_chunk")),
            (ops.cp_to_rank_order.default, (x, p.cu_seqlens.to(torch.int32), 4, "contiguous"))]


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.int8, torch.complex128])
def test_opcheck_every_element_size(dtype):
    for op, args in _cases(dtype):
        if dtype.is_floating_point or dtype.is_complex:
            args = (args[0].clone().requires_grad_(),) + args[1:]
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


@pytest.mark.parametrize("layout", ["dual_chunk", "contiguous"])
@pytest.mark.parametrize("cp_size", [2, 3, 8])
def test_bytes_equal_the_python_implementation(layout, cp_size):
    rng = random.Random(cp_size)
    gen = torch.Generator().manual_seed(cp_size)
    impls = {"cp_split": _cp_ops._split_impl, "cp_split_adjoint": _cp_ops._split_adjoint_impl,
             "cp_to_sequence_order": _cp_ops._to_sequence_order_impl, "cp_to_rank_order": _cp_ops._to_rank_order_impl}
    for trial in range(4):
        cu = torch.tensor(random_padded_cu(rng, rng.randint(1, 6), cp_size), dtype=torch.int64)
        rank = rng.randrange(cp_size)
        T = int(cu[-1])
        for dtype in DTYPES:
            x = random_tensor((T, 2, 3), dtype, gen)
            for name, impl in impls.items():
                inp = x[: T // cp_size].contiguous() if name == "cp_split_adjoint" else x
                args = (cu, cp_size, rank, layout) if "split" in name else (cu, cp_size, layout)
                got = getattr(ops, name)(inp, *args)
                assert got.dtype == dtype and torch.equal(got, impl(inp, *args)), (name, dtype, cu.tolist(), rank)


def test_cu_seqlens_int32_or_strided():
    p = cp.Partition([0, 8, 24], 2, 1)
    x = torch.randn(24, 2)
    strided = torch.stack([p.cu_seqlens, p.cu_seqlens], 1)[:, 0]
    assert not strided.is_contiguous()
    for cu in (strided, p.cu_seqlens.to(torch.int32)):
        assert torch.equal(ops.cp_split(x, cu, 2, 1, "dual_chunk"), p.split(x))


def test_bad_input_names_the_value():
    cu = torch.tensor([0, 8, 16])
    cases = [
        (r"input has 15 rows, expected 16", lambda: ops.cp_split(torch.zeros(15), cu, 2, 0, "dual_chunk")),
        (r"input has 16 rows, expected 8 \(this rank's rows", lambda: ops.cp_split_adjoint(torch.zeros(16), cu, 2, 0,
                                                                                             "dual_chunk")),
        (r"cu_seqlens has dtype torch.float32, expected torch.int32 or torch.int64",
         lambda: ops.cp_split(torch.zeros(16), cu.float(), 2, 0, "dual_chunk")),
        (r"cu_seqlens has 2 dimensions", lambda: ops.cp_split(torch.zeros(16), cu[None], 2, 0, "dual_chunk")),
        (r"layout = 'zigzag'", lambda: ops.cp_to_rank_order(torch.zeros(16), cu, 2, "zigzag")),
        (r"cp_rank = 2 out of range \[0, 2\)", lambda: ops.cp_split(torch.zeros(16), cu, 2, 2, "dual_chunk")),
        (r"not contiguous", lambda: ops.cp_split(torch.zeros(3, 16).t(), cu, 2, 0, "dual_chunk")),
        (r"0-d tensor", lambda: ops.cp_split(torch.tensor(1.0), cu, 2, 0, "dual_chunk")),
        (r"padded length 6", lambda: ops.cp_split(torch.zeros(14), torch.tensor([0, 8, 14]), 2, 0, "dual_chunk")),
    ]
    for match, fn in cases:
        # The dispatcher does not keep headroom's class across the stable ABI: the message is kept.
        with pytest.raises(RuntimeError, match=match):
            fn()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("layout", ["dual_chunk", "contiguous"])
def test_cuda_kernels_equal_the_cpu_ops(layout):
    # CUDA tensors: headroom._cuda's launch code on the current stream (one plan per device, kept).
    rng = random.Random(11)
    gen = torch.Generator().manual_seed(11)
    for cp_size in (2, 8):
        cu = torch.tensor(random_padded_cu(rng, 5, cp_size), dtype=torch.int64)
        rank, T = cp_size - 1, int(cu[-1])
        for dtype in DTYPES:
            x = random_tensor((T, 5), dtype, gen)
            y = x[: T // cp_size].contiguous()
            for name, inp in (("cp_split", x), ("cp_split_adjoint", y), ("cp_to_sequence_order", x),
                              ("cp_to_rank_order", x)):
                args = (cu, cp_size, rank, layout) if "split" in name else (cu, cp_size, layout)
                got = getattr(ops, name)(inp.cuda(), *args)
                assert got.is_cuda and torch.equal(got.cpu(), getattr(ops, name)(inp, *args)), (name, dtype, cp_size)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_plan_dropped_while_a_side_stream_kernel_reads_it():
    # The C++ plan cache keeps a device copy of each plan's boundaries. A kernel on a side stream
    # (held back by _sleep) must keep reading the boundaries it was launched with while the
    # default stream builds 28 newer plans (the cache keeps 16, so the first plan leaves it) and
    # writes junk into freshly allocated int64 tensors of the same size. Before plans were kept per
    # stream, the side stream reused the default stream's plan, whose copy went back to the caching
    # allocator for the default stream and was overwritten under the waiting kernel.
    cp_size, rank, layout = 2, 1, "dual_chunk"
    cu = torch.tensor([0, 8, 24, 32], dtype=torch.int64)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(5))
    expected = ops.cp_split(x, cu, cp_size, rank, layout)
    xd = x.cuda()
    ops.cp_split(xd, cu, cp_size, rank, layout)  # the plan, built on the default stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(500_000_000)  # ~0.3 s of GPU time before the split below runs
        got = ops.cp_split(xd, cu, cp_size, rank, layout)
    for first in range(4, 32, 4):
        for r in (0, 1):
            for lay in ("dual_chunk", "contiguous"):
                ops.cp_split(xd, torch.tensor([0, first, 32], dtype=torch.int64), cp_size, r, lay)
    junk = [torch.full((cu.numel(),), 1 << 40, dtype=torch.int64, device="cuda") for _ in range(256)]
    torch.cuda.synchronize()
    assert len(junk) == 256 and torch.equal(got.cpu(), expected)


def _evict_plans(xd):
    """28 other plans on the current stream: more than the ops' cache keeps (16)."""
    for first in range(4, 32, 4):
        for r in (0, 1):
            for lay in ("dual_chunk", "contiguous"):
                ops.cp_split(xd, torch.tensor([0, first, 32], dtype=torch.int64), 2, r, lay)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graph_keeps_its_plan_through_evictions():
    # Captured on torch.cuda.graph's own stream, the op takes the batch's plan made on the default
    # stream (a capture cannot copy boundaries to the device) and pins it: 28 newer plans and junk
    # in fresh int64 blocks later, each replay still reads the boundaries it was captured with.
    cu = torch.tensor([0, 8, 24, 32], dtype=torch.int64)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(6))
    xd = x.cuda()
    ops.cp_split(xd, cu, 2, 1, "dual_chunk")  # the plan, on the default stream
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = ops.cp_split(xd, cu, 2, 1, "dual_chunk")
    _evict_plans(xd)
    junk = [torch.full((cu.numel(),), 1 << 40, dtype=torch.int64, device="cuda") for _ in range(256)]
    for seed in (7, 8):
        x2 = torch.randn(32, 64, generator=torch.Generator().manual_seed(seed))
        xd.copy_(x2)
        g.replay()
        torch.cuda.synchronize()
        assert len(junk) == 256 and torch.equal(got.cpu(), ops.cp_split(x2, cu, 2, 1, "dual_chunk")), seed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_graph_refuses_a_batch_it_first_sees_while_capturing():
    xd = torch.randn(40, 8, device="cuda")
    cu = torch.tensor([0, 12, 40], dtype=torch.int64)  # no plan on this device yet
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="first seen inside a CUDA graph capture"):
        with torch.cuda.graph(g):
            ops.cp_split(xd, cu, 2, 0, "dual_chunk")
    ops.cp_split(xd, cu, 2, 0, "dual_chunk")  # the stream left capture; the op runs eagerly

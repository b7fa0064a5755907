# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp on a GPU: the CUDA path (headroom._cuda's kernels) byte for byte against the
CPU path for every op, dtype, odd row widths, batches past the runs kernel's capacity and past
the staged-boundaries limit; gradcheck in double precision on CUDA; the current stream (CUDA
graph capture on a side stream); torch.compile(fullgraph=True). Skipped without a GPU."""
import random

import pytest
import torch

import headroom
from headroom.torch import cp

from _cp_cases import DTYPES, random_padded_cu, random_raw_cu, random_tensor

DEVICE = "cuda"
try:
    from headroom import _cuda  # noqa: F401
except ImportError:
    _cuda = None
pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the CUDA path needs a GPU"),
    pytest.mark.skipif(_cuda is None, reason="headroom was built without nvcc: no headroom._cuda"),
]


def _same(a, b):
    """Same shape, dtype and bytes (NaN-safe), a on the GPU and b on the host."""
    assert a.device.type == DEVICE and b.device.type == "cpu"
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.cpu().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _check_ops(part, x_cpu, raw_cpu=None):
    x = x_cpu.to(DEVICE)
    local_cpu = part.split(x_cpu)
    _same(part.split(x), local_cpu)
    _same(part.split_adjoint(local_cpu.to(DEVICE)), part.split_adjoint(local_cpu))
    _same(part.to_sequence_order(x), part.to_sequence_order(x_cpu))
    _same(part.to_rank_order(x), part.to_rank_order(x_cpu))
    if raw_cpu is not None:
        raw = raw_cpu.to(DEVICE)
        for shift in (0, 1):
            _same(part.pad_split(raw, 1, shift), part.pad_split(raw_cpu, 1, shift))


@pytest.mark.parametrize("layout", ["dual_chunk", "contiguous"])
@pytest.mark.parametrize("cp_size", [1, 2, 4, 8])
def test_cuda_equals_cpu(layout, cp_size):
    rng = random.Random(cp_size)
    gen = torch.Generator().manual_seed(cp_size)
    for trial in range(3):
        raw_cu = random_raw_cu(rng, rng.randint(1, 9))
        part = cp.Partition.from_raw(raw_cu, cp_size, rng.randrange(cp_size), layout=layout,
                                     total_multiple=rng.choice([1, 256]))
        for dtype in DTYPES:
            for width in ((), (1,), (3,), (4, 8), (17,)):  # odd row bytes take the narrow paths
                x = random_tensor((part.global_rows, *width), dtype, gen)
                raw = random_tensor((raw_cu[-1], *width), dtype, gen)
                _check_ops(part, x, raw)


def test_cuda_large_batches():
    # > 128 runs (the runs kernel's capacity) and > 6K sequences (boundaries not staged), and a
    # copy over the runs kernel's byte limit (256 MiB): the tiled kernel.
    gen = torch.Generator().manual_seed(0)
    rng = random.Random(1)
    for sequences, width in ((300, 64), (7000, 2)):
        cu = random_padded_cu(rng, sequences, 4, max_chunks=3)
        part = cp.Partition(cu, 4, 3)
        _check_ops(part, random_tensor((cu[-1], width), torch.bfloat16, gen))
    part = cp.Partition([0, 20480, 40960], 2, 1)
    x = torch.randn(40960, 4096, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(part.split(x), x.index_select(0, part.local_index(device="cuda")))
    assert torch.equal(part.to_sequence_order(x), x.index_select(0, part.gather_index(device="cuda")))


def test_cuda_gradcheck_double():
    part = cp.Partition.from_raw([0, 5, 5, 19, 40], 2, 1)
    d = dict(dtype=torch.float64, device="cuda", requires_grad=True)
    T, n = part.global_rows, part.local_rows
    assert torch.autograd.gradcheck(part.split, (torch.randn(T, 3, **d),))
    assert torch.autograd.gradcheck(part.split_adjoint, (torch.randn(n, 3, **d),))
    assert torch.autograd.gradcheck(part.to_sequence_order, (torch.randn(T, 2, **d),))
    assert torch.autograd.gradcheck(part.to_rank_order, (torch.randn(T, 2, **d),))
    for shift in (0, 1):
        assert torch.autograd.gradcheck(lambda x: part.pad_split(x, 0, shift), (torch.randn(40, 2, **d),))
        assert torch.autograd.gradgradcheck(lambda x: part.pad_split(x, 0, shift), (torch.randn(40, 2, **d),))
    assert torch.autograd.gradgradcheck(part.split, (torch.randn(T, 3, **d),))


def test_cuda_opcheck():
    part = cp.Partition.from_raw([0, 7, 17, 30], 2, 1)
    d = dict(dtype=torch.float64, device="cuda", requires_grad=True)
    ops = torch.ops.headroom
    cu, raw_cu = part.cu_seqlens, part._raw_cu
    for op, args in (
        (ops.cp_split, (torch.randn(part.global_rows, 3, **d), cu, 2, 1, "dual_chunk")),
        (ops.cp_split_adjoint, (torch.randn(part.local_rows, 3, **d), cu, 2, 1, "dual_chunk")),
        (ops.cp_to_sequence_order, (torch.randn(part.global_rows, 3, **d), cu, 2, "dual_chunk")),
        (ops.cp_to_rank_order, (torch.randn(part.global_rows, 3, **d), cu, 2, "dual_chunk")),
        (ops.cp_pad_split, (torch.randn(30, 3, **d), raw_cu, 2, 1, "dual_chunk", 1, 1, 1, 0.0, 1)),
    ):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def test_cuda_current_stream_graph_capture():
    # The ops launch on the current stream: capturing them on a side stream works (a launch on
    # another stream would invalidate the capture) and the replay recomputes from new inputs.
    part = cp.Partition.from_raw([0, 7, 17, 30], 2, 0)
    x = torch.randn(part.global_rows, 64, device="cuda")
    raw = torch.randint(0, 100, (30,), device="cuda")
    part.split(x), part.to_sequence_order(x), part.pad_split(raw, 0, 1)  # plans bound to the device
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        local = part.split(x)
        back = part.to_sequence_order(x)
        labels = part.pad_split(raw, 0, 1)
    x.copy_(torch.randn_like(x))
    raw.copy_(torch.randint(0, 100, (30,), device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(local.cpu(), part.split(x.cpu()))
    assert torch.equal(back.cpu(), part.to_sequence_order(x.cpu()))
    assert torch.equal(labels.cpu(), part.pad_split(raw.cpu(), 0, 1))


def test_cuda_side_stream_and_compile():
    part = cp.Partition([0, 8, 20], 2, 1)
    x = torch.randn(20, 5, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = part.split(x)
    s.synchronize()
    assert torch.equal(y.cpu(), part.split(x.cpu()))
    f = torch.compile(lambda t: part.split_adjoint(part.split(t * 2)).sum(0), fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(f(x), part.split_adjoint(part.split(x * 2)).sum(0))


def test_cuda_bad_input():
    part = cp.Partition([0, 8, 20], 2, 0)
    with pytest.raises(headroom.invalid_argument, match=r"input has 19 rows"):
        part.split(torch.zeros(19, 3, device="cuda"))
    with pytest.raises(headroom.invalid_argument, match=r"strides"):
        part.split(torch.zeros(3, 20, device="cuda").t())
    with pytest.raises(headroom.invalid_argument, match=r"loss mask on cpu, ids on cuda"):
        cp.Partition.from_raw([0, 7], 2, 0).shifted_label_split(torch.zeros(7, device="cuda"), torch.ones(7))


def test_cuda_pad_split_mostly_pads():
    # One raw row, then pads and a dummy sequence: the kernel writes the pad value around it.
    part = cp.Partition.from_raw([0, 1], 2, 0, total_multiple=8)
    raw = torch.tensor([[7.0, 8.0, 9.0]], dtype=torch.bfloat16)
    for shift in (0, 1):
        _same(part.pad_split(raw.to(DEVICE), 2.5, shift), part.pad_split(raw, 2.5, shift))

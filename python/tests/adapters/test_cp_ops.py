# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp on CPU: opcheck (schema, fake, autograd) on every op, gradcheck in double
precision, the reference vectors, round trips on random packed batches for every dtype, both
layouts, torch.compile(fullgraph=True), and every bad input."""
import random
import warnings

import pytest
import torch

import headroom
from headroom.torch import _cp_ops, _cp_plans, cp

from _cp_cases import DTYPES, GATHER_INDEX, PADDED_CU, RANK_ROWS, random_padded_cu, random_raw_cu, random_tensor

ops = torch.ops.headroom
# The C++ ops of headroom._torch_ops raise RuntimeError with headroom's message (the dispatcher does
# not keep the class across the stable ABI); the Python ops raise headroom.invalid_argument.
OP_ERROR = RuntimeError if _cp_ops._torch_ops is not None else headroom.invalid_argument


def _all_ranks(part):
    return [part.for_rank(r) for r in range(part.cp_size)]


# ---- reference vectors -------------------------------------------------------------------------------


def test_reference_split_and_gather_index():
    x = torch.arange(20)
    for r in (0, 1):
        p = cp.Partition(torch.tensor(PADDED_CU, dtype=torch.int32), 2, r)
        assert p.split(x).tolist() == RANK_ROWS[r]
        assert p.local_index().tolist() == RANK_ROWS[r]
        assert p.local_cu_seqlens.tolist() == [0, 4, 10]
    p = cp.Partition(PADDED_CU, 2, 0)
    assert p.gather_index().tolist() == GATHER_INDEX
    flat = torch.tensor(RANK_ROWS[0] + RANK_ROWS[1])
    assert p.to_sequence_order(flat).tolist() == list(range(20))
    assert p.to_rank_order(torch.arange(20)).tolist() == RANK_ROWS[0] + RANK_ROWS[1]


def test_reference_cp4_vectors():
    expect = {0: [0, 7, 8, 9, 22, 23], 1: [1, 6, 10, 11, 20, 21], 2: [2, 5, 12, 13, 18, 19], 3: [3, 4, 14, 15, 16, 17]}
    for r, rows in expect.items():
        assert cp.Partition([0, 8, 24], 4, r).split(torch.arange(24)).tolist() == rows


def test_reference_shifted_labels_from_raw():
    # a0..a6 = 1..7, b0..b9 = 11..20; pads 0. Labels are the next token of the same sequence, the
    # pad value past its last real token, and the mask is 0 exactly there.
    ids = torch.tensor(list(range(1, 8)) + list(range(11, 21)))
    p0 = cp.Partition.from_raw([0, 7, 17], 2, 0)
    p1 = p0.for_rank(1)
    assert p0.cu_seqlens.tolist() == PADDED_CU
    labels, mask = p0.shifted_label_split(ids)
    assert labels.tolist() == [2, 3, 0, 0, 12, 13, 14, 0, 0, 0]
    assert mask.tolist() == [True, True, False, False, True, True, True, False, False, False]
    labels, mask = p1.shifted_label_split(ids)
    assert labels.tolist() == [4, 5, 6, 7, 15, 16, 17, 18, 19, 20]
    assert mask.tolist() == [True] * 10
    # The reference loss mask (prompt 3 + 4 tokens): rank 0 keeps no token, rank 1 all ten.
    raw_mask = torch.tensor([0, 0, 0, 1, 1, 1, 1] + [0, 0, 0, 0, 1, 1, 1, 1, 1, 1], dtype=torch.float32)
    assert p0.shifted_label_split(ids, raw_mask)[1].tolist() == [0.0] * 10
    assert p1.shifted_label_split(ids, raw_mask)[1].tolist() == [1.0] * 10
    # pad_split with shift 0 is split(pad(raw)).
    assert p0.pad_split(ids, pad_value=-1).tolist() == [1, 2, 7, -1, 11, 12, 13, 20, -1, -1]


def test_pad_split_with_dummy_sequence():
    # AReaL pads the micro-batch total to a multiple of 256 with one dummy sequence.
    p = cp.Partition.from_raw([0, 7, 17], 2, 1, total_multiple=256)
    assert p.cu_seqlens.tolist() == [0, 8, 20, 256]
    out = p.pad_split(torch.arange(1, 18), pad_value=-5)
    padded = torch.full((256,), -5)
    padded[:7] = torch.arange(1, 8)
    padded[8:18] = torch.arange(8, 18)
    assert torch.equal(out, cp.Partition([0, 8, 20, 256], 2, 1).split(padded))


# ---- round trips on random batches -------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["dual_chunk", "contiguous"])
@pytest.mark.parametrize("cp_size", [1, 2, 4, 8])
def test_round_trips(layout, cp_size):
    rng = random.Random(cp_size * 7 + len(layout))
    gen = torch.Generator().manual_seed(cp_size)
    for trial in range(4):
        cu = random_padded_cu(rng, rng.randint(1, 9), cp_size)
        if layout == "contiguous":
            cu[-1] += (-cu[-1]) % cp_size
        p = cp.Partition(cu, cp_size, 0, layout=layout)
        parts = _all_ranks(p)
        for dtype in DTYPES:
            x = random_tensor((cu[-1], 3, 2), dtype, gen)
            locals_ = [q.split(x) for q in parts]
            assert all(t.shape == (cu[-1] // cp_size, 3, 2) and t.dtype == dtype for t in locals_)
            flat = torch.cat(locals_)
            assert torch.equal(p.to_sequence_order(flat), x)
            assert torch.equal(p.to_rank_order(x), flat)
            # Summing split's adjoint over the ranks inverts split.
            total = sum(q.split_adjoint(t).to(torch.float64 if not dtype.is_complex else dtype)
                        for q, t in zip(parts, locals_))
            assert torch.equal(total, x.to(total.dtype))
            # The index plan agrees with the op.
            assert torch.equal(x.index_select(0, parts[-1].local_index()), locals_[-1])


@pytest.mark.parametrize("cp_size", [1, 2, 4])
def test_pad_split_equals_split_of_padded(cp_size):
    rng = random.Random(cp_size)
    gen = torch.Generator().manual_seed(3)
    for trial in range(5):
        raw_cu = random_raw_cu(rng, rng.randint(1, 7))
        p = cp.Partition.from_raw(raw_cu, cp_size, cp_size - 1, total_multiple=rng.choice([1, 64]))
        pcu = p.cu_seqlens.tolist()
        for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
            raw = random_tensor((raw_cu[-1], 5), dtype, gen)
            pad = 1 if dtype == torch.bool else 7
            padded = torch.full((pcu[-1], 5), pad, dtype=dtype)
            for s in range(len(raw_cu) - 1):
                n = raw_cu[s + 1] - raw_cu[s]
                padded[pcu[s]:pcu[s] + n] = raw[raw_cu[s]:raw_cu[s + 1]]
            split = cp.Partition(pcu, cp_size, cp_size - 1)
            assert torch.equal(p.pad_split(raw, pad_value=pad), split.split(padded))


# ---- opcheck, gradcheck, compile ---------------------------------------------------------------------


def _opcheck_cases():
    p = cp.Partition.from_raw([0, 7, 17, 30], 2, 1)
    cu = p.cu_seqlens
    T, n = p.global_rows, p.local_rows
    d = dict(dtype=torch.float64, requires_grad=True)
    raw_cu = p._raw_cu
    return [
        (ops.cp_split, (torch.randn(T, 3, **d), cu, 2, 1, "dual_chunk")),
        (ops.cp_split, (torch.randn(T, 2, 2, **d), cu, 4, 3, "contiguous")),
        (ops.cp_split_adjoint, (torch.randn(n, 3, **d), cu, 2, 1, "dual_chunk")),
        (ops.cp_to_sequence_order, (torch.randn(T, 3, **d), cu, 2, "dual_chunk")),
        (ops.cp_to_rank_order, (torch.randn(T, 3, **d), cu, 2, "dual_chunk")),
        (ops.cp_pad_split, (torch.randn(30, 3, **d), raw_cu, 2, 1, "dual_chunk", 1, 1, 1, 0.0, 0)),
        (ops.cp_pad_split, (torch.randn(30, **d), raw_cu, 2, 0, "dual_chunk", 1, 1, 1, 0.0, 1)),
        (ops.cp_pad_split_adjoint, (torch.randn(n, 3, **d), raw_cu, 30, 2, 1, "dual_chunk", 1, 1, 1, 1)),
    ]


@pytest.mark.parametrize("case", range(8))
def test_opcheck(case):
    op, args = _opcheck_cases()[case]
    result = torch.library.opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_gradcheck_double():
    p = cp.Partition.from_raw([0, 5, 5, 19], 2, 0)
    T, n = p.global_rows, p.local_rows
    d = dict(dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(p.split, (torch.randn(T, 3, **d),))
    assert torch.autograd.gradcheck(p.split_adjoint, (torch.randn(n, 3, **d),))
    assert torch.autograd.gradcheck(p.to_sequence_order, (torch.randn(T, 2, **d),))
    assert torch.autograd.gradcheck(p.to_rank_order, (torch.randn(T, 2, **d),))
    for shift in (0, 1):
        assert torch.autograd.gradcheck(lambda x: p.pad_split(x, 0, shift), (torch.randn(19, 2, **d),))
        assert torch.autograd.gradgradcheck(lambda x: p.pad_split(x, 0, shift), (torch.randn(19, 2, **d),))
    assert torch.autograd.gradgradcheck(p.split, (torch.randn(T, 3, **d),))


def test_compile_fullgraph_no_graph_break():
    p = cp.Partition.from_raw([0, 7, 17], 2, 0)

    def step(hidden, ids):
        labels, mask = p.shifted_label_split(ids)
        local = p.split(hidden * 2)
        back = p.split_adjoint(local)
        return (local.sum(1) * mask).sum() + back.sum(), labels

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    hidden = torch.randn(20, 4, requires_grad=True)
    ids = torch.arange(1, 18)
    loss, labels = compiled(hidden, ids)
    ref_hidden = hidden.detach().clone().requires_grad_()
    ref_loss, ref_labels = step(ref_hidden, ids)
    assert torch.equal(labels, ref_labels)
    torch.testing.assert_close(loss, ref_loss)
    loss.backward()
    ref_loss.backward()
    torch.testing.assert_close(hidden.grad, ref_hidden.grad)


# ---- bad input ---------------------------------------------------------------------------------------


def _raises(match, fn, exc=headroom.invalid_argument):
    with pytest.raises(exc, match=match):
        fn()


def test_bad_cu_seqlens():
    _raises(r"decreases at index 2: 8 then 4", lambda: cp.Partition([0, 8, 4], 2, 0))
    _raises(r"sequence 1 has padded length 6 .* expected a multiple of 4", lambda: cp.Partition([0, 8, 14], 2, 0))
    _raises(r"\[0\] = 3, expected 0", lambda: cp.Partition([3, 8], 2, 0))
    _raises(r"dtype torch.float32, expected torch.int32 or torch.int64",
            lambda: cp.Partition(torch.tensor([0.0, 8.0]), 2, 0))
    _raises(r"shape \(1, 3\), expected one dimension", lambda: cp.Partition(torch.tensor([[0, 4, 8]]), 2, 0))
    _raises(r"cp_rank = 2 out of range \[0, 2\)", lambda: cp.Partition([0, 8], 2, 2))
    _raises(r"cp_size = 0", lambda: cp.Partition([0, 8], 0, 0))
    _raises(r"layout = 'zigzag'", lambda: cp.Partition([0, 8], 2, 0, layout="zigzag"))
    # The ops validate the boundaries they are given too.
    _raises(r"padded length 6", lambda: ops.cp_split(torch.zeros(14), torch.tensor([0, 8, 14]), 2, 0, "dual_chunk"),
            OP_ERROR)
    _raises(r"decreases", lambda: ops.cp_split(torch.zeros(8), torch.tensor([0, 8, 4, 8]), 2, 0, "dual_chunk"), OP_ERROR)


def test_bad_tensors():
    p = cp.Partition.from_raw([0, 7, 17], 2, 0)
    _raises(r"input has 19 rows .* expected 20", lambda: p.split(torch.zeros(19, 2)))
    _raises(r"input has 9 rows .* expected 10", lambda: p.split_adjoint(torch.zeros(9)))
    _raises(r"raw input has 20 rows .* expected 17", lambda: p.pad_split(torch.zeros(20)))
    _raises(r"strides \(1, 20\), expected a contiguous tensor", lambda: p.split(torch.zeros(4, 20).t()))
    _raises(r"0-d tensor", lambda: p.split(torch.tensor(1.0)))
    # A meta tensor runs the fake implementation (shapes only), as torch.compile does.
    assert p.split(torch.zeros(20, 3, device="meta")).shape == (10, 3)
    _raises(r"cu_seqlens has dtype torch.float64", lambda: ops.cp_split(torch.zeros(8), torch.tensor([0.0, 8.0],
                                                                                                       dtype=torch.float64), 2, 0, "dual_chunk"),
            OP_ERROR)
    _raises(r"loss mask on meta, ids on cpu", lambda: p.shifted_label_split(torch.zeros(17),
                                                                             torch.zeros(17, device="meta")))
    _raises(r"shift = -1", lambda: p.pad_split(torch.zeros(17), 0, -1))
    _raises(r"built from padded cu_seqlens", lambda: cp.Partition([0, 8], 2, 0).pad_split(torch.zeros(8)),
            headroom.logic_error)
    _raises(r"policy = 'all'", lambda: cp.collect_output(torch.zeros(10), p, policy="all"))
    _raises(r"per_token returned shape \(9,\)",
            lambda: cp.collect_output(torch.zeros(10), p, policy="per_token", per_token=lambda o: o[:9]))


def test_errors_are_value_errors():
    # headroom.invalid_argument is one class for both extension modules and a ValueError.
    with pytest.raises(ValueError):
        cp.Partition([0, 8, 4], 2, 0)
    _cuda = pytest.importorskip("headroom._cuda", reason="the package was built without nvcc")

    part = headroom.cp.Partition([0, 8], 2, 0)
    with pytest.raises(headroom.invalid_argument, match="headroom._cuda.split: elements of 3 bytes"):
        _cuda.split(part, (16, 2, 8), 4096, 8, 8192, 4, 1, 3, 0)
    with pytest.raises(headroom.invalid_argument,
                       match=r"_cuda.split: cu_seqlens entries of 2 bytes, expected int32 \(4\) or int64 \(8\)"):
        _cuda.split(part, (16, 2, 2), 4096, 8, 8192, 4, 1, 4, 0)
    with pytest.raises(headroom.invalid_argument,
                       match=r"headroom._cuda.pad_split: raw cu_seqlens entries of 3 bytes, expected int32 \(4\)"):
        _cuda.pad_split(headroom.cp.pad([0, 8], "dual_chunk", 2), part, (16, 2, 3), (32, 2, 8), 4096, 8, 8192, 4, 1,
                        4, 0, bytes(4), 0)
    with pytest.raises(headroom.invalid_argument, match="pad value of 2 bytes, expected one element of 4 bytes"):
        _cuda.pad_split(headroom.cp.pad([0, 8], "dual_chunk", 2), part, (16, 2, 8), (32, 2, 8), 4096, 8, 8192, 4, 1,
                        4, 0, bytes(2), 0)
    with pytest.raises(headroom.invalid_argument, match="device cu_seqlens is null"):
        _cuda.to_sequence_order(part, (0, 2, 8), 4096, 8, 8192, 8, 1, 4, 0)
    # Every subclass keeps its class: _core's translators handle the errors _cuda throws.
    with pytest.raises(headroom.capacity_error, match="matrix_view: shape rows x width"):
        _cuda.split(part, (16, 2, 8), 4096, 2**40, 8192, 4, 2**40, 4, 0)


def test_collect_output_none_is_local():
    p = cp.Partition.from_raw([0, 7, 17], 2, 1)
    out = torch.randn(10, 6)
    got = cp.collect_output(out, p, policy="none")
    assert got.rows is out and got.cu_seqlens.tolist() == [0, 4, 10]


def test_partition_reuse_and_cache():
    # One plan per batch: the ops find the partition's plan by its cu_seqlens tensor, and a copy of
    # the tensor (as opcheck and compiled graphs make) builds the same plan from its values.
    p = cp.Partition([0, 8, 20], 2, 1)
    x = torch.randn(20, 3)
    copy = p.cu_seqlens.clone()
    assert torch.equal(ops.cp_split(x, copy, 2, 1, "dual_chunk"), p.split(x))
    # Mutating the boundaries in place rebuilds the plan (tensor version changes).
    copy[2] = 16
    _raises(r"input has 20 rows.* expected 16", lambda: ops.cp_split(x, copy, 2, 1, "dual_chunk"), OP_ERROR)


def test_partition_methods_see_boundaries_changed_in_place():
    # The eager path uses the partition's own plan only while its boundaries are unchanged.
    p = cp.Partition([0, 8, 20], 2, 0)
    x = torch.arange(20.0).unsqueeze(1)
    assert p.split(x).shape == (10, 1)
    p.cu_seqlens[2] = 16
    _raises(r"input has 20 rows .* expected 16", lambda: p.split(x))
    assert torch.equal(p.split(x[:16]), cp.Partition([0, 8, 16], 2, 0).split(x[:16]))
    assert torch.equal(p.to_sequence_order(x[:16]), cp.Partition([0, 8, 16], 2, 0).to_sequence_order(x[:16]))
    raw = cp.Partition.from_raw([0, 5, 9], 2, 0)
    ids = torch.arange(9)
    before = raw.pad_split(ids)
    raw.raw_cu_seqlens[1] = 3
    assert torch.equal(raw.pad_split(ids, 0, 0), cp.Partition.from_raw([0, 3, 9], 2, 0).pad_split(ids))
    assert not torch.equal(before, raw.pad_split(ids))


def test_backward_refuses_boundaries_changed_in_place():
    # The gradient follows the forward's boundaries: changed in place in between (values or not),
    # the backward refuses, as save_for_backward would, instead of scattering by other ones.
    # Through the Partition (eager) and through torch.ops (the C++ ops' autograd kernel, or the
    # Python ops' register_autograd, whose save_for_backward says it in torch's words).
    via_ops = (headroom.logic_error, "modified in place after the forward") if _cp_ops._torch_ops is not None \
        else (RuntimeError, "modified by an inplace operation")
    for name, (exc, match) in (("eager", (headroom.logic_error, "modified in place after the forward")),
                               ("torch.ops", via_ops)):
        p = cp.Partition([0, 8, 20], 2, 0)
        x = torch.arange(20.0).unsqueeze(1).requires_grad_()
        y = p.split(x) if name == "eager" else ops.cp_split(x, p.cu_seqlens, 2, 0, "dual_chunk")
        p.cu_seqlens[2] = 16
        with pytest.raises(exc, match=match):
            y.sum().backward()
        assert x.grad is None, name


def test_eager_path_equals_dispatcher():
    # Partition's methods skip the dispatcher in plain eager mode; under a dispatch mode (as
    # torch.compile and opcheck are) they go through torch.ops.headroom. Same values, same grads.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    p = cp.Partition.from_raw([0, 7, 17, 30], 4, 2)
    x = torch.randn(p.global_rows, 3, dtype=torch.float64)
    raw = torch.randn(30, 3, dtype=torch.float64)
    cases = [(p.split, x), (p.split_adjoint, x[: p.local_rows]), (p.to_sequence_order, x), (p.to_rank_order, x),
             (lambda t: p.pad_split(t, 0, 1), raw)]
    for fn, inp in cases:
        a = inp.clone().requires_grad_()
        eager = fn(a)
        (eager * eager).sum().backward()
        b = inp.clone().requires_grad_()
        with Seen() as seen:
            dispatched = fn(b)
            (dispatched * dispatched).sum().backward()
        assert any(op.startswith("headroom.cp_") for op in seen.ops), seen.ops
        assert torch.equal(eager, dispatched) and torch.equal(a.grad, b.grad)


def test_pad_value_bytes_for_every_dtype():
    # The CUDA path passes the pad value to the kernel as one element's bytes.
    from headroom.torch._cp_ops import _element_bytes

    for dtype in DTYPES:
        value = torch.tensor(1.5 if dtype.is_floating_point or dtype.is_complex else 1, dtype=dtype)
        b = _element_bytes(value)
        assert len(b) == value.element_size()
        back = torch.tensor(list(b), dtype=torch.uint8).view(dtype)
        assert torch.equal(back, value.reshape(1))


def test_pad_fill_is_cached_per_value_and_dtype():
    # The CUDA path builds a pad value's bytes once per (value, dtype), not per call.
    from headroom.torch._cp_ops import _element_bytes, _fill, _fill_bytes

    for dtype in (torch.bfloat16, torch.float32, torch.int64, torch.int8, torch.bool):
        for value in (0.0, 1.0, -1.0):
            if dtype is torch.bool and value < 0:
                continue
            want = _element_bytes(torch.tensor(value, dtype=dtype))
            assert _fill(value, dtype) == want
            assert _fill_bytes[(value, dtype)] == want
            assert _fill(value, dtype) is _fill_bytes[(value, dtype)]
    # Same value, two dtypes: two different fills (1.0 in bfloat16 is not 1 in int64).
    assert _fill(1.0, torch.bfloat16) != _fill(1.0, torch.int64)


def test_pad_split_mostly_pads():
    # One raw row, then pads and a dummy sequence: cu [0,1] -> padded [0,4,8] at cp = 2.
    part = cp.Partition.from_raw([0, 1], 2, 0, total_multiple=8)
    assert part.cu_seqlens.tolist() == [0, 4, 8]
    out = part.pad_split(torch.tensor([[7.0, 8.0, 9.0]], dtype=torch.bfloat16), 2.5)
    expect = torch.full((4, 3), 2.5, dtype=torch.bfloat16)
    expect[0] = torch.tensor([7.0, 8.0, 9.0])
    assert torch.equal(out, expect)


def test_cpu_path_needs_no_cuda_module(monkeypatch):
    # CPU tensors use headroom._core's index plans only: a package built without nvcc runs them.
    monkeypatch.setattr(_cp_plans, "_cuda", None)
    p = cp.Partition.from_raw([0, 5, 12], 2, 1)
    ids = torch.arange(12)
    assert torch.equal(p.pad_split(ids, -1), p.split(cp.Partition([0, 8, 16], 2, 0).split_adjoint(
        torch.zeros(8, dtype=torch.int64)) + torch.tensor([0, 1, 2, 3, 4, -1, -1, -1, 5, 6, 7, 8, 9, 10, 11, -1])))


def test_partition_keeps_its_own_boundaries():
    cu = torch.tensor([0, 8, 20])
    p = cp.Partition(cu, 2, 0)
    cu[1] = 4  # the caller reuses its tensor for the next batch
    assert p.cu_seqlens.tolist() == [0, 8, 20]
    assert p.split(torch.arange(20)).tolist() == [0, 1, 6, 7, 8, 9, 10, 17, 18, 19]


def test_vmap_uses_the_ops(capfd):
    # Under a functorch transform the eager path steps aside: vmap runs the op (torch's batching
    # fallback, which names it) per sample. The fallback's notice is a Python warning in recent
    # torch and a C++ warning on stderr in others (2.11): either names the op.
    p = cp.Partition([0, 8, 20], 2, 0)
    x = torch.randn(3, 20, 2, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = torch.vmap(p.split)(x)
    notices = [str(w.message) for w in caught] + [capfd.readouterr().err]
    assert any("headroom::cp_split" in n for n in notices), notices
    assert torch.equal(y, torch.stack([p.split(t) for t in x]))

# SPDX-License-Identifier: Apache-2.0
"""gather and collect_output over a real torch.distributed group: CP ranks are processes on the
gloo backend (CPU). Values in sequence order, the adjoint's gradient (x cp for a replicated
loss, or local only), every gather_output policy, AReaL's gathers against headroom's; ranks that
disagree (cu_seqlens, dtype, width, layout, a bad local input) raise on every rank."""
import os
import sys

import pytest
import torch
import torch.distributed as dist
import spawned

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def _worker(rank, world, store_file, areal_ok):
    # A file store: no port to pick (and race for) on a shared machine.
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        _checks(rank, world, areal_ok)
        if world == 2:
            _disagreements(rank)
    finally:
        dist.destroy_process_group()


def _checks(rank, world, areal_ok):
    import headroom
    from headroom.torch import cp

    raw_cu = [0, 7, 17, 17, 40, 41]
    part = cp.Partition.from_raw(raw_cu, world, rank, total_multiple=32)
    T = part.global_rows
    gen = torch.Generator().manual_seed(5)  # the same tensors on every rank
    x = torch.randn(T, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(T, 3, generator=gen, dtype=torch.float64)

    # Values: every rank gets the batch back in sequence order.
    local = part.split(x).requires_grad_()
    full = cp.gather(local, part)
    assert torch.equal(full, x)
    # Adjoint: a loss computed identically on every rank gets cp x its split gradient.
    (full * w).sum().backward()
    assert torch.equal(local.grad, world * part.split(w))
    # gradient="local": only this rank's rows carry a gradient (AReaL's postprocess).
    local2 = part.split(x).requires_grad_()
    (cp.gather(local2, part, gradient="local") * w).sum().backward()
    assert torch.equal(local2.grad, part.split(w))

    # gather_output policies.
    got = cp.collect_output(part.split(x), part, policy="full")
    assert torch.equal(got.rows, x) and torch.equal(got.cu_seqlens, part.cu_seqlens)
    got = cp.collect_output(part.split(x), part, policy=cp.GatherOutput.PER_TOKEN,
                            per_token=lambda o: o.sum(-1, keepdim=True))
    assert got.rows.shape == (T, 1) and torch.equal(got.rows, x.sum(-1, keepdim=True))
    got = cp.collect_output(part.split(x), part, policy="none")
    assert torch.equal(got.rows, part.split(x)) and torch.equal(got.cu_seqlens, part.local_cu_seqlens)

    # The contiguous layout all-gathers straight into the result (rank-major is sequence order),
    # and every method gives the same rows (CPU tensors take the all-gather and reorder).
    cpart = cp.Partition(part.cu_seqlens, world, rank, layout="contiguous")
    local3 = cpart.split(x).requires_grad_()
    full = cp.gather(local3, cpart)
    assert torch.equal(full, x)
    (full * w).sum().backward()
    assert torch.equal(local3.grad, world * cpart.split(w))
    for method in ("all_gather", "pipelined", "in_place"):
        assert torch.equal(cp.gather(part.split(x), part, method=method), x)
    try:
        cp.gather(part.split(x), part, method="ring")
    except headroom.invalid_argument as e:
        assert "method = 'ring', expected one of 'auto', 'all_gather', 'pipelined', 'in_place'" in str(e), str(e)
    else:
        raise AssertionError("gather with an unknown method did not raise")

    # A partition of another CP size than the group: refused before any collective.
    other = cp.Partition([0, 4 * world], 2 * world, rank)
    try:
        cp.gather(other.split(torch.zeros(4 * world)), other)
    except headroom.invalid_argument as e:
        assert f"rank {rank} of {world}" in str(e) and f"cp_size {2 * world}" in str(e), str(e)
    else:
        raise AssertionError("gather with a partition of another cp size did not raise")

    if areal_ok:
        _areal_checks(rank, world, part, x, w)


def _areal_checks(rank, world, part, x, w):
    import types

    sys.path.insert(0, os.path.dirname(__file__))
    from test_cp_dropins import _PackedSeqParams, _areal_source

    from headroom.torch import areal as hr

    mpu = types.ModuleType("megatron.core.parallel_state")
    mpu.get_context_parallel_world_size = lambda: world
    mpu.get_context_parallel_rank = lambda: rank
    mpu.get_context_parallel_group = lambda: dist.group.WORLD
    megatron, core, psp = (types.ModuleType(n) for n in ("megatron", "megatron.core", "megatron.core.packed_seq_params"))
    core.parallel_state, megatron.core, psp.PackedSeqParams = mpu, core, _PackedSeqParams
    data = types.ModuleType("areal.utils.data")
    data.is_multi_modal_key = lambda key: False
    sys.modules.update({"megatron": megatron, "megatron.core": core, "megatron.core.parallel_state": mpu,
                        "megatron.core.packed_seq_params": psp, "areal.utils.data": data})
    source, origin = _areal_source()
    theirs = types.ModuleType("areal_packed_context_parallel")
    exec(compile(source, origin, "exec"), theirs.__dict__)
    cu = part.cu_seqlens

    # reassemble_cp_packed_logprobs: 1-D per-token vectors, backward through the reduce-scatter.
    v, vw = x[:, 0].contiguous(), w[:, 0].contiguous()
    ref_in = part.split(v).requires_grad_()
    ref = theirs.reassemble_cp_packed_logprobs(ref_in, cu)
    got_in = part.split(v).requires_grad_()
    got = hr.reassemble_cp_packed_logprobs(got_in, cu)
    assert torch.equal(got, ref) and torch.equal(got, v)
    (ref * vw).sum().backward()
    (got * vw).sum().backward()
    assert torch.equal(got_in.grad, ref_in.grad)

    # postprocess_packed_seqs_context_parallel: [1, T/cp, V] logits, peers detached.
    ref_in = part.split(x).unsqueeze(0).requires_grad_()
    ref = theirs.postprocess_packed_seqs_context_parallel(ref_in, cu, True)
    got_in = part.split(x).unsqueeze(0).requires_grad_()
    got = hr.postprocess_packed_seqs_context_parallel(got_in, cu, True)
    assert torch.equal(got, ref) and torch.equal(got, x)
    (ref * w).sum().backward()
    (got * w).sum().backward()
    assert torch.equal(got_in.grad, ref_in.grad)
    for post, gather_output in ((False, True), (True, False)):
        out = part.split(x).unsqueeze(0)
        assert torch.equal(hr.postprocess_packed_seqs_context_parallel(out, cu, post, gather_output),
                           theirs.postprocess_packed_seqs_context_parallel(out, cu, post, gather_output))


@pytest.mark.parametrize("world", [2, 4])
def test_gather_over_gloo(world, tmp_path):
    sys.path.insert(0, os.path.dirname(__file__))
    from test_cp_dropins import _areal_source

    areal_ok = _areal_source()[0] is not None
    spawned.spawn(_worker, args=(world, str(tmp_path / "store"), areal_ok), nprocs=world)
    if not areal_ok:
        pytest.skip("gather checked; AReaL's gathers not compared (AReaL is not installed)")


def _raises(exc, parts, fn):
    try:
        fn()
    except exc as e:
        for p in parts:
            assert p in str(e), (p, str(e))
        return
    raise AssertionError(f"expected {exc.__name__} with {parts}")


def _disagreements(rank):
    import headroom
    from headroom.torch import cp

    calls = []
    real = dist.all_gather_into_tensor
    dist.all_gather_into_tensor = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        # Agreed once per (partition, dtype, width): the second gather moves the data only.
        part = cp.Partition([0, 8, 16], 2, rank)
        x = torch.arange(16.0).unsqueeze(1)
        assert torch.equal(cp.gather(part.split(x), part), x) and len(calls) == 2
        assert torch.equal(cp.gather(part.split(x), part), x) and len(calls) == 3
        assert torch.equal(cp.gather(part.split(x), part, check=False), x) and len(calls) == 4
    finally:
        dist.all_gather_into_tensor = real

    def mismatch(fields, a, b):
        return [f"on rank {rank}: ranks 0 and 1 describe different batches ({fields} differ): rank 0 has cp rank 0 of "
                f"2, layout dual_chunk, {a}", f"; rank 1 has cp rank 1 of 2, layout dual_chunk, {b}", "no data moved"]

    # Different cu_seqlens (same total: the data would gather and come back scrambled).
    p = cp.Partition([0, 8, 16] if rank == 0 else [0, 4, 16], 2, rank)
    fp = [cp.Partition(c, 2, 0)._padded.partition.fingerprint(0, 1) for c in ([0, 8, 16], [0, 4, 16])]
    _raises(headroom.collective_mismatch,
            mismatch("cu_seqlens fingerprint", f"16 rows in 2 sequences (cu_seqlens fingerprint {fp[0]:#x})",
                     f"16 rows in 2 sequences (cu_seqlens fingerprint {fp[1]:#x})"),
            lambda: cp.gather(p.split(torch.zeros(16, 3)), p))
    # Different dtypes, and widths (gloo would abort the process): every rank raises instead.
    p = cp.Partition([0, 8, 16], 2, rank)
    dtype = torch.float32 if rank == 0 else torch.bfloat16
    _raises(headroom.collective_mismatch, mismatch("dtype", "16 rows", "16 rows") +
            ["dtype torch.float32, width 3; rank 1", "dtype torch.bfloat16, width 3; no data"],
            lambda: cp.gather(torch.zeros(8, 3, dtype=dtype), p))
    _raises(headroom.collective_mismatch, ["(width differ)", "width 3; rank 1", "width 5; no data"],
            lambda: cp.gather(torch.zeros(8, 3 if rank == 0 else 5), p))
    # Different layouts.
    q = cp.Partition([0, 8, 16], 2, rank, layout="dual_chunk" if rank == 0 else "contiguous")
    _raises(headroom.collective_mismatch, ["(layout, cu_seqlens fingerprint differ)", "layout dual_chunk",
                                           "layout contiguous"],
            lambda: cp.gather(torch.zeros(8, 1), q))
    # A rank with bad input raises its own error; the other is told, and neither waits.
    rows = 8 if rank == 0 else 7
    if rank == 1:
        _raises(headroom.invalid_argument, ["local input has 7 rows"], lambda: cp.gather(torch.zeros(rows, 2), p))
    else:
        _raises(headroom.collective_mismatch, ["on rank 0: rank(s) [1] of the group rejected their arguments"],
                lambda: cp.gather(torch.zeros(rows, 2), p))
    # After all that, the partition still gathers (the failures were not cached as agreed).
    assert torch.equal(cp.gather(p.split(torch.arange(16.0)), p), torch.arange(16.0))


#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.cp's custom ops on one GPU against the same kernels called raw, PyTorch's
index_select with TE-style index tensors, and a device copy, in one run.

1. Bandwidth, the shapes of bench_cp_bandwidth / cp_torch.py (16K and 128K tokens x 4096 bf16
   split and reorder, the reorder at the logits width 151,936; cp in {2, 8}; random packed batches
   of 256..8192-token sequences), small cases rotating through buffer sets so they read memory,
   not L2. Per row: the torch op (Partition.split / .to_sequence_order: custom op, output
   allocated by torch, current stream), the raw kernel launch (headroom._cuda.split with
   headroom._core's partition, pointers and a stream: the C++ kernel of bench_cp_bandwidth), torch.index_select with
   thd_get_partitioned_indices' int32 index (split) or the reassemble index (reorder, AReaL /
   Megatron's inverse_gather_perm), and out.copy_ of the same bytes. CUDA-event medians behind a
   spin kernel, so host overhead is not timed. Target: the op within 2 % of the raw kernel.
2. Dispatch overhead: host microseconds per call on a small batch (4K tokens x 128 bf16, cp 2, the
   GPU idle between calls) of the op through Partition (eager: the implementation without the
   dispatcher; with autograd when the input needs grad), through torch.ops.headroom (the
   dispatcher, as torch.compile sees the op), the same op called below autograd (the C++ op alone,
   with a _AutoDispatchBelowAutograd guard each call: what torch.ops costs less the Python autograd
   kernel), the raw _cuda launch and torch.index_select.
   Target: Partition - raw and torch.ops - raw <= 10 us (torch.ops: the C++ op of headroom._torch_ops
   when built, its autograd registered from Python; else the Python custom op).

    python3 bench/cp_torch_ops.py [--iterations 20] [--warmup 3] [--calls 2000] [--dispatch-only]

Output: two tables, one JSON line; with $OUT set, also $OUT/cp_torch_ops.json. Without a GPU or
without headroom._cuda it prints "skipped: ..." and exits 77.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cp_torch import median_ms, packed_batch, rotation_sets  # noqa: E402

BANDWIDTH_TARGET = 0.98  # the op's bandwidth / the raw kernel's
# The GPU spins this long before each timed run (~1-2 ms): longer than Python takes to enqueue up
# to 16 op calls, so the op's host overhead is not in its bandwidth (the dispatch table shows it).
SPIN_CYCLES = 3_000_000
DISPATCH_TARGET_US = 10.0


def skip(why):
    print(f"skipped: {why}")
    sys.exit(77)


def raw_partition(cu, cp, rank):
    """headroom._core's partition and a device copy of its boundaries (kept alive by the caller)
    with the (pointer, entries, bytes per entry) headroom._cuda's launches take."""
    from headroom import cp as core_cp

    dcu = torch.tensor(cu, dtype=torch.int64, device="cuda")
    return core_cp.Partition(cu, cp, rank), dcu, (dcu.data_ptr(), dcu.numel(), 8)


def run_case(op, tokens, width, cp, args, modules):
    _cuda, hcp, te = modules
    cu = packed_batch(tokens, cp, 42 + cp)
    rank = cp // 2
    part = hcp.Partition(cu, cp, rank)
    core_part, dcu, device_cu = raw_partition(cu, cp, rank)
    stream = torch.cuda.current_stream().cuda_stream
    if op == "split":
        index = te.thd_get_partitioned_indices(torch.tensor(cu, dtype=torch.int32, device="cuda"), tokens, cp, rank)
        ours, launch = part.split, _cuda.split
        rows = part.local_rows
    else:
        index = part.gather_index(device="cuda")
        ours, launch = part.to_sequence_order, _cuda.to_sequence_order
        rows = part.global_rows

    def raw(x, out):
        launch(core_part, device_cu, x.data_ptr(), tokens, out.data_ptr(), rows, width, 2, stream)
    bytes_out = rows * width * 2
    sets = rotation_sets(2 * bytes_out)
    xs = [torch.empty((tokens, width), dtype=torch.bfloat16, device="cuda").normal_() for _ in range(sets)]
    outs = [torch.empty((rows, width), dtype=torch.bfloat16, device="cuda") for _ in range(sets)]
    held = [None] * sets  # the op's outputs stay alive per set, so the allocator rotates them too

    # Correctness in the same run: the op equals the raw kernel byte for byte, and index_select on
    # 4096 random rows (a full third copy would not fit at 128K x 151936).
    got = ours(xs[0])
    raw(xs[0], outs[0])
    sample = torch.randint(0, rows, (4096,), device="cuda")
    expect = torch.index_select(xs[0], 0, index[sample].long())
    torch.cuda.synchronize()
    if not (torch.equal(got.view(torch.int16), outs[0].view(torch.int16))
            and torch.equal(got[sample].view(torch.int16), expect.view(torch.int16))):
        raise SystemExit(f"cp_torch_ops.py: {op} {tokens}x{width} cp {cp}: the op, the raw kernel and index_select differ")
    del expect, got

    def run_ours(k):
        held[k] = None  # the allocator hands its block to the new output: one output per set
        held[k] = ours(xs[k])

    def run_raw(k):
        raw(xs[k], outs[k])

    ms_ours = median_ms(run_ours, args.iterations, args.warmup, sets, SPIN_CYCLES)
    ms_raw = median_ms(run_raw, args.iterations, args.warmup, sets, SPIN_CYCLES)
    ms_index = median_ms(lambda k: torch.index_select(xs[k], 0, index, out=outs[k]), args.iterations, args.warmup,
                         sets, SPIN_CYCLES)
    srcs = [x[:rows] for x in xs]
    ms_copy = median_ms(lambda k: outs[k].copy_(srcs[k]), args.iterations, args.warmup, sets, SPIN_CYCLES)
    for buffers in (xs, outs, srcs, held):
        buffers.clear()
    del dcu
    torch.cuda.empty_cache()
    gbps = lambda ms: 2 * bytes_out / (ms * 1e-3) / 1e9  # noqa: E731
    return {"op": op, "tokens": tokens, "width": width, "cp": cp, "sequences": len(cu) - 1, "bytes_out": bytes_out,
            "sets": sets, "op_ms": ms_ours, "raw_ms": ms_raw, "index_select_ms": ms_index, "memcpy_ms": ms_copy,
            "op_gbps": gbps(ms_ours), "raw_gbps": gbps(ms_raw), "index_select_gbps": gbps(ms_index),
            "memcpy_gbps": gbps(ms_copy), "op_vs_raw": ms_raw / ms_ours, "op_vs_memcpy": ms_copy / ms_ours,
            "index_select_vs_memcpy": ms_copy / ms_index, "meets_target": ms_raw / ms_ours >= BANDWIDTH_TARGET}


def host_us_each(fns, calls, repeats=5):
    """Median over `repeats` of the host time per call of `calls` back-to-back calls, for each of
    `fns` (None: None). Every function is warmed first and the repeats go round all of them, so no
    row is measured while the process is still warming up or in a quieter moment than the others."""
    live = [fn for fn in fns if fn is not None]
    for fn in live:
        for _ in range(max(100, calls // 10)):
            fn()
    torch.cuda.synchronize()
    samples = {id(fn): [] for fn in live}
    for _ in range(repeats):
        for fn in live:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[id(fn)].append((time.perf_counter() - t0) / calls * 1e6)
            torch.cuda.synchronize()
    return [None if fn is None else sorted(samples[id(fn)])[repeats // 2] for fn in fns]


def host_us(fn, calls, repeats=5):
    return host_us_each([fn], calls, repeats)[0]


class _EmptyFunction(torch.autograd.Function):
    """The least a Python-defined differentiable op pays: Function.apply with a forward that only
    allocates the output (no kernel) and a backward never run."""

    @staticmethod
    def forward(ctx, x, rows):
        return x.new_empty((rows, *x.shape[1:]))

    @staticmethod
    def backward(ctx, g):
        raise AssertionError("not run")


def autograd_floor_us(args, x, rows):
    """Host us per call of _EmptyFunction on an input that needs grad, through the C++ apply the
    eager path uses."""
    apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, _EmptyFunction)
    return host_us(lambda: apply(x, rows), args.calls)


def ops_kind():
    """Which implementation torch.ops.headroom.cp_split is."""
    from headroom.torch import _cp_ops

    return ("C++ ops of headroom._torch_ops (stable ABI)" if _cp_ops._torch_ops is not None
            else "Python custom ops (headroom._torch_ops not built)")


def dispatch_rows(args, modules):
    _cuda, hcp, _ = modules
    tokens, width, cp, rank = 4096, 128, 2, 1
    cu = packed_batch(tokens, cp, 7)
    raw_cu = [0]
    for a, b in zip(cu[:-1], cu[1:]):
        raw_cu.append(raw_cu[-1] + (b - a) - 3)  # three pads per sequence
    part = hcp.Partition(cu, cp, rank)
    rpart = hcp.Partition.from_raw(raw_cu, cp, rank)
    from headroom import cp as core_cp

    p, dcu, dev_cu = raw_partition(cu, cp, rank)
    padding = core_cp.pad(raw_cu, "dual_chunk", cp)  # as Partition.from_raw pads (tp 1, extra 1)
    rp, dpcu, dev_pcu = raw_partition(padding.padded_cu_seqlens.tolist(), cp, rank)
    drcu = torch.tensor(raw_cu, dtype=torch.int64, device="cuda")
    dev_rcu = (drcu.data_ptr(), drcu.numel(), 8)
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    local = torch.randn(part.local_rows, width, device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, 1000, (raw_cu[-1],), device="cuda")
    out_local = torch.empty_like(local)
    out_global = torch.empty_like(x)
    out_ids = torch.empty(rpart.local_rows, dtype=ids.dtype, device="cuda")
    index = part.local_index(device="cuda")
    s = torch.cuda.current_stream().cuda_stream
    ops = torch.ops.headroom
    cu_t = part.cu_seqlens
    pad = torch.tensor(0, dtype=ids.dtype).numpy().tobytes()
    below = torch._C._AutoDispatchBelowAutograd
    aten = torch.ops.aten  # the peer through the same door: a torch op called through torch.ops, allocating
    perm = torch.randperm(tokens, device="cuda")  # a whole-sequence reorder's index

    def cpp(op, *a):  # the op below the Autograd key: no Python autograd kernel
        def call():
            with below():
                return op(*a)
        return call
    rows = [
        ("split", lambda: part.split(x), lambda: ops.cp_split(x, cu_t, cp, rank, "dual_chunk"),
         cpp(ops.cp_split, x, cu_t, cp, rank, "dual_chunk"),
         lambda: _cuda.split(p, dev_cu, x.data_ptr(), tokens, out_local.data_ptr(), part.local_rows, width, 2, s),
         lambda: torch.index_select(x, 0, index, out=out_local),
         lambda: aten.index_select(x, 0, index)),
        ("split (input needs grad)", lambda: part.split(xg), lambda: ops.cp_split(xg, cu_t, cp, rank, "dual_chunk"),
         None,
         lambda: _cuda.split(p, dev_cu, x.data_ptr(), tokens, out_local.data_ptr(), part.local_rows, width, 2, s),
         # PyTorch's own differentiable gather (allocating, as the op does): its autograd node too
         lambda: torch.index_select(xg, 0, index),
         lambda: aten.index_select(xg, 0, index)),
        ("split_adjoint", lambda: part.split_adjoint(local), lambda: ops.cp_split_adjoint(local, cu_t, cp, rank, "dual_chunk"),
         cpp(ops.cp_split_adjoint, local, cu_t, cp, rank, "dual_chunk"),
         lambda: _cuda.split_adjoint(p, dev_cu, local.data_ptr(), part.local_rows, out_global.data_ptr(), tokens, width,
                                     2, s), None, None),
        ("to_sequence_order", lambda: part.to_sequence_order(x), lambda: ops.cp_to_sequence_order(x, cu_t, cp, "dual_chunk"),
         cpp(ops.cp_to_sequence_order, x, cu_t, cp, "dual_chunk"),
         lambda: _cuda.to_sequence_order(p, dev_cu, x.data_ptr(), tokens, out_global.data_ptr(), tokens, width, 2, s),
         None, lambda: aten.index_select(x, 0, perm)),
        ("pad_split shift 1", lambda: rpart.pad_split(ids, 0, 1), None, None,
         lambda: _cuda.pad_split(padding, rp, dev_rcu, dev_pcu, ids.data_ptr(), raw_cu[-1], out_ids.data_ptr(),
                                 rpart.local_rows, 1, 8, s, pad, 1), None, None),
    ]
    floor = autograd_floor_us(args, xg, part.local_rows)
    times = host_us_each([fn for row in rows for fn in row[1:]], args.calls)
    results = []
    for i, (name, *_) in enumerate(rows):
        via_partition, via_ops, cpp_op, raw, index_select, aten_ops = times[6 * i:6 * i + 6]
        r = {"op": name, "tokens": tokens, "width": width, "cp": cp, "calls": args.calls,
             "partition_us": via_partition, "torch_ops_us": via_ops, "cpp_op_us": cpp_op, "raw_us": raw,
             "index_select_us": index_select, "aten_torch_ops_us": aten_ops}
        r["overhead_us"] = r["partition_us"] - r["raw_us"]
        if via_ops is not None:  # through the dispatcher: the C++ op of headroom._torch_ops when built
            r["torch_ops_overhead_us"] = via_ops - raw
            r["torch_ops_meets_target"] = r["torch_ops_overhead_us"] <= DISPATCH_TARGET_US
        if "grad" in name:  # the part of the overhead that any Function.apply pays, measured alone
            r["autograd_floor_us"] = floor
        r["meets_target"] = r["overhead_us"] <= DISPATCH_TARGET_US
        results.append(r)
    del dcu, dpcu, drcu
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--dispatch-only", action="store_true", help="the dispatch table only (no bandwidth rows)")
    args = parser.parse_args()
    if args.iterations < 1 or args.warmup < 0 or args.calls < 1:
        parser.error(f"--iterations {args.iterations} and --calls {args.calls} must be >= 1, --warmup {args.warmup} >= 0")
    if not torch.cuda.is_available():
        skip("cp_torch_ops.py: no CUDA device")
    try:
        from headroom import _cuda
        from headroom.torch import cp as hcp
        from headroom.torch import te
    except ImportError as e:
        skip(f"cp_torch_ops.py: headroom with its CUDA module is not importable ({e}); pip install . with nvcc present")
    modules = (_cuda, hcp, te)
    name = torch.cuda.get_device_name()
    shapes = [("split", 16384, 4096), ("split", 131072, 4096), ("reorder", 16384, 4096),
              ("reorder", 131072, 4096), ("reorder", 16384, 151936), ("reorder", 131072, 151936)]
    results, skipped = [], []
    for op, tokens, width in [] if args.dispatch_only else shapes:
        for cp in (2, 8):
            free, _ = torch.cuda.mem_get_info()
            in_bytes = tokens * width * 2
            out_bytes = in_bytes // cp if op == "split" else in_bytes
            # Each set: input, the raw / index_select output, the op's output (held).
            need = rotation_sets(2 * out_bytes) * (in_bytes + 2 * out_bytes) + (1 << 30)
            if need > free:
                skipped.append(f"{op} {tokens}x{width} cp {cp}: needs {need >> 30} GiB, {free >> 30} GiB free")
                continue
            results.append(run_case(op, tokens, width, cp, args, modules))
    dispatch = dispatch_rows(args, modules)

    print(f"torch {torch.__version__} on {name}; medians of {args.iterations} runs after {args.warmup} warm-up; "
          f"GB/s = (read + written) / time; op = headroom.torch.cp custom op, raw = headroom._cuda launch")
    print(f"{'op':8} {'tokens':>7} {'width':>7} {'cp':>3} {'out MiB':>9} {'sets':>4} | {'op us':>9} {'GB/s':>6} | "
          f"{'raw us':>9} {'GB/s':>6} | {'idx_sel us':>10} {'GB/s':>6} | {'memcpy us':>9} {'GB/s':>6} | "
          f"{'op/raw':>6} {'op/cpy':>6} {'idx/cpy':>7}")
    for r in results:
        print(f"{r['op']:8} {r['tokens']:7d} {r['width']:7d} {r['cp']:3d} {r['bytes_out'] / 2**20:9.1f} {r['sets']:4d} | "
              f"{1e3 * r['op_ms']:9.1f} {r['op_gbps']:6.0f} | {1e3 * r['raw_ms']:9.1f} {r['raw_gbps']:6.0f} | "
              f"{1e3 * r['index_select_ms']:10.1f} {r['index_select_gbps']:6.0f} | {1e3 * r['memcpy_ms']:9.1f} "
              f"{r['memcpy_gbps']:6.0f} | {100 * r['op_vs_raw']:5.1f}% {100 * r['op_vs_memcpy']:5.1f}% "
              f"{100 * r['index_select_vs_memcpy']:6.1f}%{'' if r['meets_target'] else '  < 98 %'}")
    for s in skipped:
        print(f"not run: {s}")
    print()
    print(f"dispatch: host us per call, {args.calls} calls back to back, median of 5 rounds over every row; overhead = op (Partition) - raw")
    print("Partition: the method (eager: no dispatcher); torch.ops: torch.ops.headroom.* (what compile and export see), "
          f"{ops_kind()}")
    print("aten ops: torch.ops.aten.index_select (the peer: torch's own gather through torch.ops, allocating its "
          "output; to_sequence_order: a whole-sequence permutation)")
    print("C++ op: torch.ops below autograd (the C++ op alone, a guard each call; torch.ops - C++ op: the Python "
          "autograd kernel)")
    print(f"{'op':26} {'Partition':>9} {'torch.ops':>9} {'C++ op':>7} {'raw':>7} {'overhead':>8} {'ops ovh':>8} "
          f"{'index_select':>12} {'aten ops':>8}")
    fmt = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
    for r in dispatch:
        late = [w for w, k in (("Partition", "meets_target"), ("torch.ops", "torch_ops_meets_target")) if r.get(k) is False]
        print(f"{r['op']:26} {r['partition_us']:9.2f} {fmt(r['torch_ops_us']):>9} {fmt(r['cpp_op_us']):>7} "
              f"{r['raw_us']:7.2f} {r['overhead_us']:8.2f} {fmt(r.get('torch_ops_overhead_us')):>8} "
              f"{fmt(r['index_select_us']):>12} {fmt(r['aten_torch_ops_us']):>8}"
              f"{'  > 10 us: ' + ', '.join(late) if late else ''}")
    for r in dispatch:
        if "autograd_floor_us" in r:
            floor = r["autograd_floor_us"]
            print(f"{r['op']}: an empty autograd.Function.apply (forward only allocates the output) costs {floor:.2f} us "
                  f"here; the op's overhead less that floor: {r['overhead_us'] - floor:.2f} us")
    bw_ok = all(r["meets_target"] for r in results) if results else None  # None: no row measured
    dispatch_ok = all(r["meets_target"] for r in dispatch)
    ops_ok = all(r["torch_ops_meets_target"] for r in dispatch if "torch_ops_meets_target" in r)
    print(f"targets: op within 2 % of the raw kernel on every row: {'not run' if bw_ok is None else 'yes' if bw_ok else 'NO'}; "
          f"dispatch overhead <= {DISPATCH_TARGET_US:g} us: Partition {'yes' if dispatch_ok else 'NO'}, "
          f"torch.ops {'yes' if ops_ok else 'NO'}")
    report = {"bench": "cp_torch_ops", "device": name, "torch": torch.__version__, "ops": ops_kind(),
              "torch_ops_target_met": ops_ok, "iterations": args.iterations,
              "warmup": args.warmup, "dtype": "bfloat16", "bandwidth": results, "dispatch": dispatch,
              "bandwidth_target_met": bw_ok, "dispatch_target_met": dispatch_ok, "not_run": skipped}
    line = json.dumps(report)
    print(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "cp_torch_ops.json"), "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch peer of bench_cp_bandwidth: what engines run today for the CP split and for the
reorder after the all-gather, with the indices precomputed (Megatron's partition_index /
inverse_gather_perm, AReaL's reassemble indices): torch.index_select(x, 0, idx, out=out).
A device-to-device copy of the same bytes (out.copy_(x[:rows])) is measured in the same run.

Shapes: 16K and 128K tokens x 4096 bf16 for split and reorder, and the reorder at the
logits width 151,936 bf16 (16K; 128K when two copies fit). cp in {2, 8}; random packed batches of
256..8192-token sequences (multiples of 2*cp). CUDA-event medians after warm-up; small cases rotate
through buffer sets as bench_cp_bandwidth does (so they read memory, not L2); bandwidth counts
bytes read + written. Single process, one GPU.

    python3 bench/cp_torch.py [--iterations 20] [--warmup 3]

Output: a table, then one JSON line.
"""
import argparse
import json
import random

import torch


def packed_batch(tokens, cp, seed):
    rng = random.Random(seed)
    m = 2 * cp
    cu = [0]
    while cu[-1] < tokens:
        cu.append(min(tokens, cu[-1] + rng.randint(256 // m, 8192 // m) * m))
    return cu


def split_index(cu, cp, rank):
    """TE thd_get_partitioned_indices / AReaL split: chunk r and chunk 2cp-1-r of each sequence."""
    parts = []
    for start, end in zip(cu[:-1], cu[1:]):
        length = end - start
        half = length // (2 * cp)
        parts.append(torch.arange(start + rank * half, start + (rank + 1) * half))
        parts.append(torch.arange(start + length - (rank + 1) * half, start + length - rank * half))
    return torch.cat(parts)


def median_ms(fn, iterations, warmup, sets=1, spin_cycles=200000):
    """Median ms of one fn(k); each timed run calls fn(0) .. fn(sets - 1) and divides by sets.
    The GPU spins `spin_cycles` first: longer than the host takes to enqueue the calls."""
    for _ in range(warmup):
        for k in range(sets):
            fn(k)
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iterations):
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(spin_cycles)  # keep the GPU busy while Python enqueues: no host overhead timed
        start.record()
        for k in range(sets):
            fn(k)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / sets)
    times.sort()
    return times[len(times) // 2]


def rotation_sets(touched_bytes):
    """As bench_cp_bandwidth: enough buffer sets that four L2s of traffic pass between two uses."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
    return max(1, min(16, -(-4 * l2 // touched_bytes)))


def run_case(op, tokens, width, cp, args):
    cu = packed_batch(tokens, cp, 42 + cp)
    rank = cp // 2
    if op == "split":
        index = split_index(cu, cp, rank)
    else:
        flat = torch.cat([split_index(cu, cp, r) for r in range(cp)])
        index = torch.argsort(flat)  # Megatron's inverse_gather_perm
    index = index.to(device="cuda", dtype=torch.int64)
    rows = index.numel()
    bytes_out = rows * width * 2
    sets = rotation_sets(2 * bytes_out)
    xs = [torch.empty((tokens, width), dtype=torch.bfloat16, device="cuda").normal_() for _ in range(sets)]
    outs = [torch.empty((rows, width), dtype=torch.bfloat16, device="cuda") for _ in range(sets)]
    # Sanity: the index is a valid selection and index_select returns the selected rows.
    torch.index_select(xs[0], 0, index, out=outs[0])
    assert torch.equal(outs[0][: min(rows, 64)], xs[0][index[: min(rows, 64)]])
    ms_index = median_ms(lambda k: torch.index_select(xs[k], 0, index, out=outs[k]), args.iterations, args.warmup, sets)
    srcs = [x[:rows] for x in xs]
    ms_copy = median_ms(lambda k: outs[k].copy_(srcs[k]), args.iterations, args.warmup, sets)
    del xs, outs, srcs
    torch.cuda.empty_cache()
    return {"op": op, "tokens": tokens, "width": width, "cp": cp, "bytes_out": bytes_out, "sets": sets,
            "index_select_ms": ms_index, "memcpy_ms": ms_copy,
            "index_select_gbps": 2 * bytes_out / (ms_index * 1e-3) / 1e9,
            "memcpy_gbps": 2 * bytes_out / (ms_copy * 1e-3) / 1e9,
            "fraction_of_memcpy": ms_copy / ms_index}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    if args.iterations < 1 or args.warmup < 0:
        parser.error(f"--iterations {args.iterations} must be >= 1 and --warmup {args.warmup} >= 0")
    if not torch.cuda.is_available():
        raise SystemExit("cp_torch.py: needs a CUDA device")
    name = torch.cuda.get_device_name()
    shapes = [("split", 16384, 4096), ("split", 131072, 4096), ("reorder", 16384, 4096),
              ("reorder", 131072, 4096), ("reorder", 16384, 151936), ("reorder", 131072, 151936)]
    results, skipped = [], []
    for op, tokens, width in shapes:
        for cp in (2, 8):
            free, _ = torch.cuda.mem_get_info()
            in_bytes = tokens * width * 2
            out_bytes = in_bytes // cp if op == "split" else in_bytes
            need = rotation_sets(2 * out_bytes) * (in_bytes + out_bytes) + (1 << 30)
            if need > free:
                skipped.append(f"{op} {tokens}x{width} cp {cp}: needs {need >> 30} GiB, {free >> 30} GiB free")
                continue
            results.append(run_case(op, tokens, width, cp, args))
    print(f"torch {torch.__version__} on {name}; medians of {args.iterations} runs after {args.warmup} warm-up; "
          f"GB/s = (read + written) / time")
    print(f"{'op':8} {'tokens':>7} {'width':>7} {'cp':>3} {'out MiB':>10} {'sets':>4} | {'idx_sel us':>10} {'GB/s':>8} | "
          f"{'memcpy us':>9} {'GB/s':>8} | {'vs cpy':>7}")
    for r in results:
        print(f"{r['op']:8} {r['tokens']:7d} {r['width']:7d} {r['cp']:3d} {r['bytes_out'] / 2**20:10.1f} {r['sets']:4d} | "
              f"{1e3 * r['index_select_ms']:10.1f} {r['index_select_gbps']:8.0f} | {1e3 * r['memcpy_ms']:9.1f} "
              f"{r['memcpy_gbps']:8.0f} | {100 * r['fraction_of_memcpy']:6.1f}%")
    for s in skipped:
        print(f"skipped: {s}")
    print(json.dumps({"bench": "cp_torch", "device": name, "torch": torch.__version__, "iterations": args.iterations,
                      "warmup": args.warmup, "dtype": "bfloat16", "results": results, "skipped": len(skipped)}))


if __name__ == "__main__":
    main()

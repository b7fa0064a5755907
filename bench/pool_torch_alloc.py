#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch peers of bench_pool_acquire: host time per get + return of a unit's buffers over the
same training-step trace (forward then backward over all units, one unit prefetched), for the
allocators Megatron-FSDP uses when a unit has no pool slot (its fallback allocators):

  torch.empty + del        TemporaryBucketAllocator (the caching allocator)
  storage resize_          StorageResizeBasedBucketAllocator (untyped_storage().resize_(n) / resize_(0))

Bucket sizes are the padded bf16 buckets of Nemotron-H-8B and Nemotron-3-Super-120B-A12B EP64
(the same formulas as headroom/pool/models.hpp). One process, one GPU, streams idle: the numbers
are the allocators' host cost seen from Python, as an engine written in Python pays it.
Prints a table, then one JSON line. Compare with bench_pool_acquire (C++) on the same device.

  python3 bench/pool_torch_alloc.py [reps]
"""
import json
import os
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
import torch  # noqa: E402


def pad(n, m=64):
    return (n + m - 1) // m * m


def nemotron_h_8b():
    h, ffn, H, P, G, N, heads, groups, kv = 4096, 21504, 128, 64, 8, 128, 32, 8, 128
    hp, gn = H * P, G * N
    conv = hp + 2 * gn
    mamba = (2 * hp + 2 * gn + H) * h + h * hp + h + conv * 4 + conv + 3 * H + hp
    attn = (heads + 2 * groups) * kv * h + h * heads * kv + h
    mlp = 2 * ffn * h + h
    pattern = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
    sizes = {"M": [mamba], "*": [attn], "-": [mlp]}
    return "Nemotron-H-8B", [[2 * pad(n) for n in sizes[s]] for s in pattern]


def nemotron_3_super_ep64():
    h, H, P, G, N, heads, groups, kv = 4096, 128, 64, 8, 128, 32, 2, 128
    experts, moe_ffn, shared, latent, ep = 512, 2688, 5376, 1024, 64
    hp, gn = H * P, G * N
    conv = hp + 2 * gn
    mamba = (2 * hp + 2 * gn + H) * h + h * hp + h + conv * 4 + conv + 3 * H + hp
    attn = (heads + 2 * groups) * kv * h + h * heads * kv + h
    moe_dense = 2 * shared * h + 2 * latent * h + h + experts * h
    moe_experts = experts * 2 * moe_ffn * latent // ep
    pattern = "MEMEM*EMEME" * 8
    sizes = {"M": [mamba], "*": [attn], "E": [moe_dense, moe_experts]}
    return "Nemotron-3-Super-120B-A12B EP64", [[2 * pad(n) for n in sizes[s]] for s in pattern]


def step(n, acquire, release):
    for backward in (False, True):
        order = list(range(n - 1, -1, -1)) if backward else list(range(n))
        acquire(order[0])
        for i, u in enumerate(order):
            if i + 1 < n:
                acquire(order[i + 1])
            release(u)


def measure(units, acquire, release, reps, steps=10, warmup=5):
    n = len(units)
    for _ in range(warmup):
        step(n, acquire, release)
    torch.cuda.synchronize()
    per_pair = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(steps):
            step(n, acquire, release)
        t1 = time.perf_counter_ns()
        per_pair.append((t1 - t0) / (steps * 2 * n))
        torch.cuda.synchronize()
    per_pair.sort()
    q = lambda f: per_pair[int(f * (len(per_pair) - 1))]  # noqa: E731
    return statistics.median(per_pair), q(0.1), q(0.9)


def main():
    reps = max(3, int(sys.argv[1])) if len(sys.argv) > 1 else 21
    if not torch.cuda.is_available():
        print("bench/pool_torch_alloc.py: needs a CUDA device", file=sys.stderr)
        return 1
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    rows = []
    for name, units in (nemotron_h_8b(), nemotron_3_super_ep64()):
        held = [None] * len(units)

        def empty_acquire(u):
            held[u] = [torch.empty(b, dtype=torch.uint8, device=device) for b in units[u]]

        def empty_release(u):
            held[u] = None

        rows.append((name, "torch.empty + del", *measure(units, empty_acquire, empty_release, reps)))

        storages = [[torch.empty(0, dtype=torch.uint8, device=device).untyped_storage() for _ in u] for u in units]

        def resize_acquire(u):
            for s, b in zip(storages[u], units[u]):
                s.resize_(b)

        def resize_release(u):
            for s in storages[u]:
                s.resize_(0)

        rows.append((name, "storage resize_", *measure(units, resize_acquire, resize_release, reps)))
        torch.cuda.empty_cache()

    dev_name = torch.cuda.get_device_name(device)
    print(f"device: {dev_name}; torch {torch.__version__}; host time per get+return pair (median of {reps} reps)")
    print(f"{'workload':34} {'allocator':20} {'median ns':>12} {'p10..p90 ns':>24}")
    for name, alloc, med, p10, p90 in rows:
        print(f"{name:34} {alloc:20} {med:12.1f} {p10:11.1f}..{p90:<11.1f}")
    print(json.dumps({
        "bench": "pool_torch_alloc", "device": dev_name, "torch": torch.__version__, "reps": reps,
        "rows": [{"workload": n, "allocator": a, "median_ns": round(m, 1), "p10_ns": round(lo, 1),
                  "p90_ns": round(hi, 1)} for n, a, m, lo, hi in rows],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
